//go:build tools

// Package etcd pins the etcd server built for the test control plane.
package etcd

import _ "go.etcd.io/etcd/server/v3"
