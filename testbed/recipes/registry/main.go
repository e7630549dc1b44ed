// Command registry is the CNCF Distribution registry (github.com/distribution/distribution/v3,
// pinned in go.mod) with only what the test bed uses: the filesystem storage driver and no
// auth (TLS from the bed's CA is its trust). Its cmd/registry also links the S3, Azure and
// GCS drivers, which would triple the build for nothing here.
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	// RootCmd exits non-zero by itself when `serve` fails.
	registry.RootCmd.Execute() //nolint:errcheck
}
