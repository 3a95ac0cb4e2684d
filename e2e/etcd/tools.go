//go:build tools

package etcd

import _ "go.etcd.io/etcd/server/v3"
