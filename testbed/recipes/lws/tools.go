//go:build tools

// Package lws pins LeaderWorkerSet's manager (sigs.k8s.io/lws/cmd), which the test bed
// runs as a Deployment in lws-system (sps-testbed up --with lws); its CRDs, RBAC and
// webhooks come from the same module's config/.
package lws

import _ "sigs.k8s.io/lws/cmd"
