//go:build tools

// Package kube pins kube-apiserver v1.37.2 for the e2e suite, and the node
// the suite runs the shipped Deployment on: kubelet, kube-controller-manager,
// kube-scheduler and kube-proxy of the same release.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
