//go:build tools

package kube

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
