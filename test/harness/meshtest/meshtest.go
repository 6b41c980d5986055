// Package meshtest provides the real Istio ambient mesh for test/mesh:
// istiod (pilot-discovery) built from the Istio module test/istio pins,
// ztunnel built from its own source (hack/ztunnel), each packed as an
// image the way hack/image packs sluice's, and the path of Istio's own
// Helm charts, which the Istio module carries.
//
// Binaries and image archives are cached under $SLUICE_CACHE by version
// (istiod) and commit (ztunnel), so a warm run builds nothing.
package meshtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// cacheDir is $SLUICE_CACHE, else ~/.cache/sluice, as the Makefile's.
func cacheDir() (string, error) {
	if c := os.Getenv("SLUICE_CACHE"); c != "" {
		return c, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("locate the cache: %w", err)
	}
	return filepath.Join(home, ".cache", "sluice"), nil
}

// script runs one of the repository's build scripts, which prints the path
// of what it built (or found cached) on its last line.
func script(ctx context.Context, rel string, args ...string) (string, error) {
	root, err := nodetest.ModuleRoot()
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, rel), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w\n%s", rel, err, stderr.Bytes())
	}
	return strings.TrimSpace(string(out)), nil
}

// istioModule is the Istio module's directory in the module cache, at the
// version test/istio's go.mod pins, and that version.
func istioModule(ctx context.Context) (dir, version string, err error) {
	root, err := nodetest.ModuleRoot()
	if err != nil {
		return "", "", err
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "istio.io/istio")
	cmd.Dir = filepath.Join(root, "test", "istio")
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("download the Istio module test/istio pins: %w", err)
	}
	var m struct{ Dir, Version string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", "", fmt.Errorf("go mod download istio.io/istio said %q: %v", out, err)
	}
	return m.Dir, m.Version, nil
}

// Charts is the directory of Istio's Helm charts (base, istio-control,
// ztunnel, ...) in the Istio module test/istio pins.
func Charts(ctx context.Context) (string, error) {
	dir, _, err := istioModule(ctx)
	if err != nil {
		return "", err
	}
	charts := filepath.Join(dir, "manifests", "charts")
	if _, err := os.Stat(filepath.Join(charts, "ztunnel", "Chart.yaml")); err != nil {
		return "", fmt.Errorf("find the charts in the Istio module: %w", err)
	}
	return charts, nil
}

// ZtunnelCommit is the istio/ztunnel commit hack/ztunnel/COMMIT pins.
func ZtunnelCommit() (string, error) {
	root, err := nodetest.ModuleRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, "hack", "ztunnel", "COMMIT"))
	if err != nil {
		return "", fmt.Errorf("read the pinned ztunnel commit: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ErrNoZtunnel says the ztunnel binary of the pinned commit was never
// built on this machine.
var ErrNoZtunnel = errors.New("no ztunnel binary built")

// ZtunnelBinary is the cached ztunnel binary of the pinned commit, or an
// error wrapping ErrNoZtunnel when `make ztunnel` has not built it.
func ZtunnelBinary() (string, error) {
	commit, err := ZtunnelCommit()
	if err != nil {
		return "", err
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "ztunnel", commit, "ztunnel")
	if _, err := os.Stat(bin); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w at %s", ErrNoZtunnel, bin)
	} else if err != nil {
		return "", err
	}
	return bin, nil
}

// IstiodBinary is pilot-discovery at the pinned Istio version, built by
// hack/istiod/build.sh on first use (minutes, once per machine and
// version).
func IstiodBinary(ctx context.Context) (string, error) {
	return script(ctx, "hack/istiod/build.sh")
}
