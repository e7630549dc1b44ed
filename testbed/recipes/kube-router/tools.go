//go:build tools

// Pins kube-router (its network policy controller runs on the test bed's nodes, opt-in:
// `sps-testbed up --with network-policies`); build-kube-router.sh builds it from this module.
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
