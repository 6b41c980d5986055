package meshtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sluicemesh/sluice/internal/ociimage"
)

// The refs the mesh images are tagged with; "localhost/" keeps a runtime
// from ever pulling them. The tag is the version or commit they hold.
const (
	IstiodRepo  = "localhost/istio-pilot"
	ZtunnelRepo = "localhost/istio-ztunnel"
)

// recipe names the cached archives: bump it when what an image holds or
// its config changes, so a cached archive of the old recipe is not used.
const recipe = "r2"

// Archive is an image archive and the ref it is tagged with.
type Archive struct {
	Path, Ref string
}

// IstiodArchive is the istiod image (pilot-discovery at the pinned Istio
// version, nothing else: as Istio's distroless pilot image), built and
// cached beside the binary on first use.
func IstiodArchive(ctx context.Context) (Archive, error) {
	bin, err := IstiodBinary(ctx)
	if err != nil {
		return Archive{}, err
	}
	_, version, err := istioModule(ctx)
	if err != nil {
		return Archive{}, err
	}
	ref := IstiodRepo + ":" + tagOf(version)
	return cachedArchive(filepath.Join(filepath.Dir(bin), "istiod-"+recipe+".tar"), ref, func() (v1.Image, error) {
		b, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		// 1337, as Istio's own image: the chart sets runAsNonRoot.
		return ociimage.Build([]ociimage.File{{Path: "/usr/local/bin/pilot-discovery", Content: b}},
			ociimage.Config{Entrypoint: []string{"/usr/local/bin/pilot-discovery"}, User: "1337:1337"})
	})
}

// ZtunnelArchive is the ztunnel image of the pinned commit, built and
// cached beside the binary; an error wrapping ErrNoZtunnel when the binary
// was never built. ztunnel is linked against the C library, so the image
// holds the binary and the shared objects it loads, from this machine.
func ZtunnelArchive(ctx context.Context) (Archive, error) {
	bin, err := ZtunnelBinary()
	if err != nil {
		return Archive{}, err
	}
	commit, err := ZtunnelCommit()
	if err != nil {
		return Archive{}, err
	}
	ref := ZtunnelRepo + ":" + commit[:12]
	return cachedArchive(filepath.Join(filepath.Dir(bin), "ztunnel-"+recipe+".tar"), ref, func() (v1.Image, error) {
		files, err := withLibraries(ctx, bin, "/usr/local/bin/ztunnel")
		if err != nil {
			return nil, err
		}
		return ociimage.Build(files, ociimage.Config{Entrypoint: []string{"/usr/local/bin/ztunnel"}})
	})
}

// tagOf shortens a Go pseudo-version to its commit part, a valid tag.
func tagOf(version string) string {
	if i := strings.LastIndexByte(version, '-'); i >= 0 {
		return version[i+1:]
	}
	return strings.TrimPrefix(version, "v")
}

// cachedArchive writes the image build gives to path unless it is there
// and newer than nothing it was built from changed (the binary beside it
// is only ever replaced by a rename, which the archive's mtime outlives
// only when it was written after).
func cachedArchive(path, ref string, build func() (v1.Image, error)) (Archive, error) {
	a := Archive{Path: path, Ref: ref}
	if fresh(path) {
		return a, nil
	}
	img, err := build()
	if err != nil {
		return a, fmt.Errorf("build image %s: %w", ref, err)
	}
	if _, err := ociimage.WriteOCI(path, ref, img); err != nil {
		return a, err
	}
	return a, nil
}

// fresh says the archive exists and is newer than every other file in its
// directory (the binary it packs).
func fresh(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return false
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && info.ModTime().After(st.ModTime()) {
			return false
		}
	}
	return true
}

// lddPath matches the path ldd resolves a needed object to, and the
// loader's own line.
var lddPath = regexp.MustCompile(`(?m)(?:=> )?(/\S+) \(0x[0-9a-f]+\)$`)

// withLibraries is the binary at dst plus every shared object it loads
// (ldd's answer, the loader included) at the same path as on this machine.
func withLibraries(ctx context.Context, bin, dst string) ([]ociimage.File, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	files := []ociimage.File{{Path: dst, Content: b}}
	for _, m := range lddPath.FindAllStringSubmatch(string(out), -1) {
		lib, err := os.ReadFile(m[1])
		if err != nil {
			return nil, fmt.Errorf("read %s, which %s loads: %w", m[1], bin, err)
		}
		files = append(files, ociimage.File{Path: m[1], Content: lib})
	}
	if len(files) == 1 {
		return nil, fmt.Errorf("ldd found no shared objects for %s:\n%s", bin, out)
	}
	return files, nil
}
