package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sluicemesh/sluice/internal/ociimage"
)

var (
	distOnce sync.Once
	distDir  string
	distErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if distDir != "" {
		os.RemoveAll(distDir)
	}
	os.Exit(code)
}

// distOptions is `make dist` of version into dir.
func distOptions(dir string) options {
	return options{
		bin: dir, version: "v0.9.1-test", out: filepath.Join(dir, "image"),
		chart: "../../deploy/helm/sluice", helm: "../helm/helm.sh",
		platforms: []string{"linux/amd64", "linux/arm64"}, stdout: io.Discard,
	}
}

// dist is one run of `make dist`, shared by the tests that read it (an
// arm64 build is minutes cold on a small machine).
func dist(t *testing.T) string {
	t.Helper()
	distOnce.Do(func() {
		if distDir, distErr = os.MkdirTemp("", "sluice-dist-"); distErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		distErr = run(ctx, distOptions(distDir))
	})
	if distErr != nil {
		t.Fatal(distErr)
	}
	return distDir
}

// `make dist` run twice, into two directories, writes the same bytes:
// every platform's binaries and SBOMs, the image archives and the chart's
// package and OCI layout. What a release signs is a function of the
// source alone.
func TestDistIsReproducible(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	var trees [2]map[string][]byte
	trees[0] = readTree(t, dist(t))
	again := t.TempDir()
	if err := run(ctx, distOptions(again)); err != nil {
		t.Fatal(err)
	}
	trees[1] = readTree(t, again)
	for name, b := range trees[0] {
		if !bytes.Equal(b, trees[1][name]) {
			t.Errorf("%s differs between two runs", name)
		}
	}
	if len(trees[0]) != len(trees[1]) {
		t.Errorf("two runs wrote %d and %d files", len(trees[0]), len(trees[1]))
	}
	for _, want := range []string{
		"linux-amd64/sluice", "linux-amd64/sluice-agent", "linux-arm64/sluice", "linux-arm64/sluice-agent",
		"sbom/linux-amd64/sluice.cdx.json", "sbom/linux-amd64/sluice-agent.cdx.json",
		"sbom/linux-arm64/sluice.cdx.json", "sbom/linux-arm64/sluice-agent.cdx.json",
		"image/sluice.tar", "image/sluice-testapp.tar", "image/sluice-pause.tar",
		"sluice-0.9.1-test.tgz", "chart/index.json", "chart/oci-layout",
	} {
		if _, ok := trees[0][want]; !ok {
			t.Errorf("no %s written", want)
		}
	}
	if !strings.Contains(string(trees[0]["sbom/linux-arm64/sluice-agent.cdx.json"]), `"value": "arm64"`) {
		t.Errorf("the arm64 agent's SBOM does not say GOARCH arm64")
	}
}

// The chart's OCI artifact is what helm pushes: helm's media types, the
// packaged chart (values schema included, appVersion the image's version)
// as its one layer, and that package still renders with helm.
func TestChartArtifact(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	arts, err := packageChart(ctx, "../helm/helm.sh", "../../deploy/helm/sluice", "abc1234-dirty", dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(arts) != 2 || arts[0].path != filepath.Join(dir, "chart") {
		t.Fatalf("artifacts %v", arts)
	}
	// Not a SemVer: the chart keeps Chart.yaml's version.
	pkgs, _ := filepath.Glob(filepath.Join(dir, "sluice-*.tgz"))
	if len(pkgs) != 1 {
		t.Fatalf("packages %q", pkgs)
	}
	tgz, err := os.ReadFile(pkgs[0])
	if err != nil {
		t.Fatal(err)
	}
	files := tgzFiles(t, tgz)
	for _, want := range []string{"sluice/Chart.yaml", "sluice/values.yaml", "sluice/values.schema.json"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the package has no %s", want)
		}
	}
	if !strings.Contains(string(files["sluice/Chart.yaml"]), "appVersion: abc1234-dirty") {
		t.Errorf("Chart.yaml does not say the image's version:\n%s", files["sluice/Chart.yaml"])
	}

	layout := filepath.Join(dir, "chart")
	var index v1.IndexManifest
	readJSON(t, filepath.Join(layout, "index.json"), &index)
	if len(index.Manifests) != 1 || index.Manifests[0].Digest.String() != arts[0].digest {
		t.Fatalf("index.json %+v, want the one manifest %s", index, arts[0].digest)
	}
	var m v1.Manifest
	readJSON(t, filepath.Join(layout, "blobs", "sha256", index.Manifests[0].Digest.Hex), &m)
	if m.Config.MediaType != ociimage.ChartConfigMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != ociimage.ChartLayerMediaType {
		t.Fatalf("manifest %+v: not helm's chart artifact", m)
	}
	layer, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", m.Layers[0].Digest.Hex))
	if err != nil || !bytes.Equal(layer, tgz) {
		t.Errorf("the layer is not the package (%v)", err)
	}
	var cfg struct{ Name, Version, AppVersion string }
	readJSON(t, filepath.Join(layout, "blobs", "sha256", m.Config.Digest.Hex), &cfg)
	if cfg.Name != "sluice" || cfg.AppVersion != "abc1234-dirty" || m.Annotations["org.opencontainers.image.version"] != cfg.Version {
		t.Errorf("config %+v, annotations %v", cfg, m.Annotations)
	}
	if _, ok := m.Annotations["org.opencontainers.image.created"]; ok {
		t.Errorf("a creation time in the manifest: a digest per run")
	}

	// helm reads what was repacked.
	out, err := exec.CommandContext(ctx, "../helm/helm.sh", "template", "sluice", pkgs[0], "--namespace", "kube-system",
		"--kube-version", "1.30.0", "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kind: DaemonSet") {
		t.Errorf("helm template of the package: %v\n%.2000s", err, out)
	}
}

func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func tgzFiles(t *testing.T, tgz []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != 0 {
			t.Errorf("%s: mtime %v, want the epoch", h.Name, h.ModTime)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
