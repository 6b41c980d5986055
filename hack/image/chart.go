package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"

	"github.com/sluicemesh/sluice/internal/ociimage"
)

// semver is what helm takes as a chart version, after an optional "v".
var semver = regexp.MustCompile(`^v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?)$`)

// packageChart packages the chart at dir with helm, values schema and all,
// its appVersion the image's version (the tag the chart runs by default)
// and its version the image's when that is a SemVer (a release tag),
// else Chart.yaml's; then makes the package's timestamps fixed and
// writes it, and the OCI artifact of it, into out.
func packageChart(ctx context.Context, helm, dir, version, out string) ([]artifact, error) {
	tmp, err := os.MkdirTemp("", "sluice-chart-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	args := []string{"package", dir, "--destination", tmp, "--app-version", version}
	if m := semver.FindStringSubmatch(version); m != nil {
		args = append(args, "--version", m[1])
	}
	cmd := exec.CommandContext(ctx, helm, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("helm package %s: %w\n%s", dir, err, b)
	}
	pkgs, err := filepath.Glob(filepath.Join(tmp, "*.tgz"))
	if err != nil || len(pkgs) != 1 {
		return nil, fmt.Errorf("helm package %s wrote %d packages, want one", dir, len(pkgs))
	}
	raw, err := os.ReadFile(pkgs[0])
	if err != nil {
		return nil, err
	}
	tgz, err := ociimage.ReproducibleChart(raw)
	if err != nil {
		return nil, err
	}
	md, err := ociimage.ReadChartMetadata(tgz)
	if err != nil {
		return nil, err
	}
	pkg := filepath.Join(out, filepath.Base(pkgs[0]))
	if err := os.WriteFile(pkg, tgz, 0o644); err != nil {
		return nil, err
	}
	layout := filepath.Join(out, "chart")
	digest, err := ociimage.WriteChart(layout, tgz)
	if err != nil {
		return nil, err
	}
	// The package's own digest, for a checksum file beside it.
	return []artifact{
		{md.Name + ":" + md.Version, digest.String(), layout},
		{md.Name + ":" + md.Version, fmt.Sprintf("sha256:%x", sha256.Sum256(tgz)), pkg},
	}, nil
}
