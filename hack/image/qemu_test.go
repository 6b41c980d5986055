package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/sluicemesh/sluice/internal/ociimage"
)

// The arm64 image's binaries run: read back from bin/image/sluice.tar as
// a node would pull them, the agent says its version and the plugin
// answers CNI's VERSION, under qemu-user (Debian's qemu-user, which make
// prereqs installs). And the image declares the architecture its binaries
// were built for: an image of an amd64 plugin and an arm64 agent is
// refused.
func TestArm64ImageRunsUnderQemu(t *testing.T) {
	qemu := qemuAarch64(t)
	dir := dist(t)
	img := platformImageOf(t, filepath.Join(dir, "image", "sluice.tar"), "arm64")
	bins := t.TempDir()
	for _, name := range []string{"sluice", "sluice-agent"} {
		b, err := ociimage.FileOf(img, "/usr/local/bin/"+name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bins, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	out, err := exec.CommandContext(ctx, qemu, filepath.Join(bins, "sluice-agent"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "v0.9.1-test") {
		t.Errorf("qemu-aarch64 sluice-agent --version: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, qemu, filepath.Join(bins, "sluice"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND=VERSION")
	cmd.Stdin = strings.NewReader(`{"cniVersion":"1.1.0"}`)
	out, err = cmd.Output()
	var v struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err != nil || json.Unmarshal(out, &v) != nil || len(v.SupportedVersions) == 0 {
		t.Errorf("qemu-aarch64 sluice (CNI_COMMAND=VERSION): %v\n%s", err, out)
	}
	// The same binary would not run here natively: it is arm64's.
	if b, _ := os.ReadFile(filepath.Join(bins, "sluice")); !bytes.Equal(b[:4], []byte("\x7fELF")) || b[18] != 0xb7 {
		t.Errorf("the arm64 image's plugin is not an aarch64 ELF")
	}

	amd64Plugin, err := os.ReadFile(filepath.Join(dir, "linux-amd64", "sluice"))
	if err != nil {
		t.Fatal(err)
	}
	arm64Agent, err := os.ReadFile(filepath.Join(dir, "linux-arm64", "sluice-agent"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ociimage.Sluice(amd64Plugin, arm64Agent, "mixed"); err == nil || !strings.Contains(err.Error(), "amd64") {
		t.Errorf("an image of an amd64 plugin and an arm64 agent: err = %v", err)
	}
}

// platformImageOf reads the image for linux/arch out of an OCI archive
// holding an image index.
func platformImageOf(t *testing.T, archive, arch string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	untar(t, archive, dir)
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil || len(tm.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d manifests", err, len(tm.Manifests))
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range im.Manifests {
		if m.Platform != nil && m.Platform.OS == "linux" && m.Platform.Architecture == arch {
			img, err := idx.Image(m.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("no linux/%s image in %s", arch, archive)
	return nil
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// qemuAarch64 is qemu-user's aarch64 emulator. Without it the test skips
// when not root (a developer's machine) and fails as root, which is how
// make test and CI run, after make prereqs installed it.
func qemuAarch64(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"qemu-aarch64", "qemu-aarch64-static"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "no qemu-aarch64 on PATH: `make prereqs` (as root) installs Debian's qemu-user"
	if os.Geteuid() != 0 {
		t.Skip(why)
	}
	t.Fatal(why)
	return ""
}
