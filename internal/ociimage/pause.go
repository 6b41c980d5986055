package ociimage

// The pause image: the pause command (hack/pause) in a one-layer image,
// written as a docker-archive tar, the format `ctr images import` and
// `docker load` read. Tests that run real pod sandboxes use it so they
// need no registry and no network.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/sluicemesh/sluice/internal/productbuild"
)

// PauseRef is what tests tag the pause image as; "localhost/" keeps any
// runtime from trying to pull it from a real registry.
const PauseRef = "localhost/sluice-pause:test"

// PausePackage is the import path of the pause command.
const PausePackage = "github.com/sluicemesh/sluice/hack/pause"

// buildPause compiles the pause command the product's way
// (internal/productbuild) as a linux binary for the machine's own
// architecture, the one Image declares. It runs `go build` in the current
// directory, which must lie inside this module.
func buildPause(ctx context.Context, out string) error {
	opt := productbuild.Options{GOOS: "linux", GOARCH: runtime.GOARCH}
	return productbuild.Build(ctx, opt, filepath.Dir(out), productbuild.Target{Name: filepath.Base(out), Pkg: PausePackage})
}

// Pause returns an image whose only file is binary at /pause, its
// entrypoint. Timestamps are fixed, so the same binary gives the same
// digest.
func Pause(binary []byte) (v1.Image, error) {
	layerTar, err := singleFileTar("pause", binary)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("pause layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("append pause layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read image config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = runtime.GOARCH
	cfg.Config.Entrypoint = []string{"/pause"}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("set image config: %w", err)
	}
	return img, nil
}

// singleFileTar is a layer holding one executable at the root.
func singleFileTar(fileName string, content []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Name:     fileName,
		Mode:     0o755,
		Size:     int64(len(content)),
		Typeflag: tar.TypeReg,
		ModTime:  time.Unix(0, 0),
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, fmt.Errorf("layer tar header: %w", err)
	}
	if _, err := tw.Write(content); err != nil {
		return nil, fmt.Errorf("layer tar body: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer tar: %w", err)
	}
	return buf.Bytes(), nil
}

// WriteTarball writes img tagged ref as a docker-archive tar at path.
func WriteTarball(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image ref %q: %w", ref, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := tarball.Write(tag, img, f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// PackPause builds the pause binary and writes its image, tagged ref, to
// the tar at out.
func PackPause(ctx context.Context, out, ref string) error {
	dir, err := os.MkdirTemp("", "sluice-pause-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "pause")
	if err := buildPause(ctx, bin); err != nil {
		return err
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	img, err := Pause(b)
	if err != nil {
		return err
	}
	return WriteTarball(out, ref, img)
}
