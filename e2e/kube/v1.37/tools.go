//go:build tools

// Package kube pins kube-apiserver v1.37.2 for the e2e suite.
package kube

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
