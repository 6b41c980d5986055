// Package buildinfo holds the release string the product build stamps in.
package buildinfo

// Version is set by the product build (internal/productbuild), with
// -ldflags "-X github.com/sluicemesh/sluice/internal/buildinfo.Version=...".
var Version = "dev"
