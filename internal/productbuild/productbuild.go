// Package productbuild is the one spelling of how sluice's binaries are
// built: static (CGO_ENABLED=0), grpc-go without x/net/trace (the
// grpcnotrace tag: nothing here serves /debug/requests), paths trimmed,
// symbols stripped, the version stamped into internal/buildinfo. The
// Makefile's build and the Dockerfile run it through hack/build; the
// image builder, the tests of the real binaries, the bench and the demo's
// test call Build, so what they run is what ships.
//
// hack/build takes the platform as -goos/-goarch: GOOS/GOARCH in the
// environment would cross-compile the command itself under go run.
//
// The build is reproducible: the same source and version give the same
// bytes wherever and whenever they are built, in the checkout or in
// Docker's context (which holds no .git). Nothing of the machine gets in:
// paths are trimmed, VCS stamping is off (-buildvcs=false; the version
// is stamped instead), and the caller's GOFLAGS, GOAMD64, GOARM64 and
// GOFIPS140, which go would build into the binary, are replaced by the
// product's own (TestTwoBuildsAreByteIdentical). GOEXPERIMENT has no
// neutral value to pin; one set shows in the binary's build info and SBOM.
package productbuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// Tags are the build tags of every product binary.
const Tags = "grpcnotrace"

// The product's packages and the names their binaries ship under.
const (
	PluginPackage = "github.com/sluicemesh/sluice/plugin"
	AgentPackage  = "github.com/sluicemesh/sluice/daemon"
	PluginName    = "sluice"
	AgentName     = "sluice-agent"
)

// Product is the two binaries the image holds, under their shipped names
// (a fresh slice: callers append their own).
func Product() []Target { return []Target{{PluginName, PluginPackage}, {AgentName, AgentPackage}} }

// Target is one binary: the file name to write and the package to build.
type Target struct{ Name, Pkg string }

// Options are what may differ between builds of the same source.
type Options struct {
	// Version is stamped into internal/buildinfo.Version ("dev" if empty,
	// its default, so an unstamped build reports the same).
	Version string
	// ExtraTags are added to Tags (the bench's "sluicebench" profiling
	// hook).
	ExtraTags []string
	// Dir is the module tree to build in; empty for the working
	// directory, which must lie inside a module holding the packages.
	Dir string
	// GOOS and GOARCH cross-compile; empty inherits the environment's.
	GOOS, GOARCH string
}

// LDFlags are the linker flags of a product build of version.
func LDFlags(version string) string {
	if version == "" {
		version = "dev"
	}
	return "-s -w -X github.com/sluicemesh/sluice/internal/buildinfo.Version=" + version
}

// Args are the go command's arguments (after "go") that build pkgs into
// out: a file for one package, a directory ending in "/" for several.
func Args(opt Options, out string, pkgs ...string) []string {
	tags := strings.Join(append([]string{Tags}, opt.ExtraTags...), ",")
	return append([]string{"build", "-tags", tags, "-trimpath", "-buildvcs=false", "-ldflags", LDFlags(opt.Version), "-o", out}, pkgs...)
}

// pinned is the environment every product build gets whatever the
// caller's: settings go compiles into the binary (and records in its
// build info) take the toolchain's defaults, and GOFLAGS, which could add
// -race, -cover or -buildvcs, holds only go build's default -mod. Each is
// non-empty: go reads an empty variable from its env file (go env -w).
var pinned = []string{"CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOAMD64=v1", "GOARM64=v8.0", "GOFIPS140=off"}

// Env is the go command's environment for a product build (the last of
// duplicate variables wins, as exec.Cmd resolves them).
func Env(opt Options) []string {
	env := append(os.Environ(), pinned...)
	if opt.GOOS != "" {
		env = append(env, "GOOS="+opt.GOOS)
	}
	if opt.GOARCH != "" {
		env = append(env, "GOARCH="+opt.GOARCH)
	}
	return env
}

// Build builds targets into dir in one go command (the packages compile
// and link in parallel; go's build cache makes a warm build cost only the
// links). Two targets may not share a package's last path element, the
// name go writes before the rename.
func Build(ctx context.Context, opt Options, dir string, targets ...Target) error {
	dir, err := filepath.Abs(dir) // the go command runs in opt.Dir
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	defer os.RemoveAll(tmp)
	pkgs := make([]string, len(targets))
	seen := map[string]bool{}
	for i, t := range targets {
		base := path.Base(t.Pkg)
		if seen[base] {
			return fmt.Errorf("build: two packages named %s in one build", base)
		}
		seen[base], pkgs[i] = true, t.Pkg
	}
	cmd := exec.CommandContext(ctx, "go", Args(opt, tmp+string(filepath.Separator), pkgs...)...)
	cmd.Dir, cmd.Env = opt.Dir, Env(opt)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	for _, t := range targets {
		if err := os.Rename(filepath.Join(tmp, path.Base(t.Pkg)), filepath.Join(dir, t.Name)); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	return nil
}

// Binary builds pkg and returns its bytes (for an image layer).
func Binary(ctx context.Context, opt Options, pkg string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "sluice-build-")
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", pkg, err)
	}
	defer os.RemoveAll(dir)
	if err := Build(ctx, opt, dir, Target{"bin", pkg}); err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(dir, "bin"))
}
