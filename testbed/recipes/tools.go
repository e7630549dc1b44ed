//go:build tools

// Package controlplane pins the Kubernetes binaries that the tests build from the
// Go module proxy: the control plane (build.sh) and the real nodes' kubelet and
// kube-proxy (build-nodes.sh).
package controlplane

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
