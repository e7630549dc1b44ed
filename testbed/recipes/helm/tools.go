//go:build tools

// Package helm pins the helm CLI used to lint and render the chart in tests.
package helm

import _ "helm.sh/helm/v3/cmd/helm"
