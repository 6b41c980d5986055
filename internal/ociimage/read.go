package ociimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// FileOf returns the content of the regular file at path (absolute) in
// img's layers, the last layer holding it winning as in a runtime's
// rootfs: what the image ships, read back.
func FileOf(img v1.Image, path string) ([]byte, error) {
	name := strings.TrimPrefix(path, "/")
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("image layers: %w", err)
	}
	var found []byte
	for _, l := range layers {
		b, err := fileOfLayer(l, name)
		if err != nil {
			return nil, err
		}
		if b != nil {
			found = b
		}
	}
	if found == nil {
		return nil, fmt.Errorf("the image holds no file %s", path)
	}
	return found, nil
}

func fileOfLayer(l v1.Layer, name string) ([]byte, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("layer: %w", err)
		}
		if h.Name == name && h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("layer %s: %w", name, err)
			}
			return b, nil
		}
	}
}
