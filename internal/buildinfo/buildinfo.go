// Package buildinfo holds the release string stamped in by the Makefile.
package buildinfo

// Version is set with -ldflags "-X github.com/sluicemesh/sluice/internal/buildinfo.Version=...".
var Version = "dev"
