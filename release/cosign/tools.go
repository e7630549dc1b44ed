//go:build tools

// Package cosign pins the cosign that `make release` signs with and the tests verify
// with (release/build-cosign.sh builds it from the Go module proxy into the cache).
package cosign

import _ "github.com/sigstore/cosign/v2/cmd/cosign"
