// Package ociimage builds the project's container images without Docker:
// a single layer of static binaries on nothing (as the Dockerfile's
// scratch stage), fixed timestamps and owners, so the same binaries always
// give the same digest. WriteOCI writes an image as an OCI archive (an
// image layout in a tar) that `ctr images import` and `docker load` read;
// WriteOCIIndex writes the product's multi-platform image (an image index
// over one image per architecture) the same way, and WriteChart the Helm
// chart as the OCI artifact helm pulls. Every digest they return is one a
// release signs: nothing in them depends on when or where they were made.
// Build support and test support: `make image` (hack/image) writes the
// product's, the node and mesh suites load theirs, and the suites that run
// pod sandboxes load the pause image.
//
// go-containerregistry composes an image (layer, config, manifest);
// WriteOCI writes every archive, the pause image's included, with fixed
// order, owners and timestamps, an oci-layout marker and an index naming
// the ref for containerd and Docker. Its layout package is not used: it
// writes a directory that would still need the same sorted, fixed-time tar
// around it.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one regular file of a layer: its absolute path in the image, its
// content and mode (0: 0755). Every file is owned by root.
type File struct {
	Path    string
	Content []byte
	Mode    int64
}

// Config is what the image's config says beyond its files.
type Config struct {
	Entrypoint []string
	Labels     map[string]string
	// User runs the entrypoint as "uid:gid" (empty: root), for charts
	// that set runAsNonRoot without a runAsUser.
	User string
	// Arch is the architecture the image declares, the one its binaries
	// were built for (empty: this machine's).
	Arch string
}

// epoch is every timestamp in the image: none of them depends on when or
// where it was built.
var epoch = time.Unix(0, 0).UTC()

// Build returns a one-layer OCI image holding files, for linux on
// cfg.Arch.
func Build(files []File, cfg Config) (v1.Image, error) {
	layerTar, err := layer(files)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: l, History: v1.History{Created: v1.Time{Time: epoch}}})
	if err != nil {
		return nil, fmt.Errorf("append image layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = cfg.Arch
	if cf.Architecture == "" {
		cf.Architecture = runtime.GOARCH
	}
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = cfg.Entrypoint
	cf.Config.Labels = cfg.Labels
	cf.Config.User = cfg.User
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set image config: %w", err)
	}
	return img, nil
}

// layer is the layer's tar: every parent directory once (0755), then the
// files, sorted, so the bytes depend only on the files.
func layer(files []File) ([]byte, error) {
	dirs := map[string]bool{}
	byPath := map[string]File{}
	for _, f := range files {
		p := strings.TrimPrefix(path.Clean(f.Path), "/")
		if p == "" || p == "." || strings.HasPrefix(p, "..") {
			return nil, fmt.Errorf("image file path %q is not below /", f.Path)
		}
		byPath[p] = f
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	names := make([]string, 0, len(dirs)+len(byPath))
	for d := range dirs {
		names = append(names, d)
	}
	for p := range byPath {
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		hdr := &tar.Header{Name: n, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}
		f, isFile := byPath[n]
		content := f.Content
		if isFile {
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(content))
			if f.Mode != 0 {
				hdr.Mode = f.Mode
			}
		} else {
			hdr.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer tar header %s: %w", n, err)
		}
		if _, err := tw.Write(content); err != nil {
			return nil, fmt.Errorf("layer tar %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer tar: %w", err)
	}
	return buf.Bytes(), nil
}
