//go:build tools

// Package kueue pins Kueue's manager (sigs.k8s.io/kueue/cmd/kueue), which the test bed
// runs as a Deployment in kueue-system (sps-testbed up --with kueue); its CRDs, RBAC and
// webhooks come from the same module's config/.
package kueue

import _ "sigs.k8s.io/kueue/cmd/kueue"
