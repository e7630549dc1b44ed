//go:build tools

// Package containerd pins containerd 2.x (github.com/containerd/containerd/v2): the
// daemon, its runc shim and ctr, which the test bed's nodes run instead of Debian's 1.6
// (build-containerd.sh).
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
