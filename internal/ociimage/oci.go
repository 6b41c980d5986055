package ociimage

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteOCI writes img as an OCI archive at path: oci-layout, index.json
// naming the image ref (the annotations containerd and Docker read) and the
// blobs, in a fixed order with fixed timestamps. It returns the manifest's
// digest.
func WriteOCI(path, ref string, img v1.Image) (v1.Hash, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image ref %q: %w", ref, err)
	}
	entries, digest, err := ociEntries(tag, img)
	if err != nil {
		return v1.Hash{}, err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("write OCI archive: %w", err)
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			f.Close()
			return v1.Hash{}, fmt.Errorf("write %s: %w", path, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			f.Close()
			return v1.Hash{}, fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return v1.Hash{}, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return v1.Hash{}, fmt.Errorf("write OCI archive: %w", err)
	}
	return digest, nil
}

type entry struct {
	name string
	body []byte
}

// ociEntries are the archive's files: the layout marker, the index, then
// the manifest, config and layer blobs.
func ociEntries(tag name.Tag, img v1.Image) ([]entry, v1.Hash, error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("image manifest: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("image digest: %w", err)
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("image media type: %w", err)
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("image config: %w", err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("image config digest: %w", err)
	}
	index, err := indexJSON(tag, mt, digest, len(manifest))
	if err != nil {
		return nil, v1.Hash{}, err
	}
	entries := []entry{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blob(digest), manifest},
		{blob(cfgName), config},
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("image layers: %w", err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, v1.Hash{}, fmt.Errorf("layer digest: %w", err)
		}
		body, err := readAll(l)
		if err != nil {
			return nil, v1.Hash{}, err
		}
		entries = append(entries, entry{blob(d), body})
	}
	return entries, digest, nil
}

// indexJSON is the archive's index.json: the one manifest, named by ref.
func indexJSON(tag name.Tag, mt types.MediaType, digest v1.Hash, size int) ([]byte, error) {
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []map[string]any{{
			"mediaType": mt,
			"digest":    digest.String(),
			"size":      size,
			"annotations": map[string]string{
				// containerd's import names the image by the first,
				// Docker's load by the second.
				"io.containerd.image.name":          tag.Name(),
				"org.opencontainers.image.ref.name": tag.Name(),
			},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("image index: %w", err)
	}
	return index, nil
}

func blob(h v1.Hash) string {
	return filepath.Join("blobs", h.Algorithm, h.Hex)
}

func readAll(l v1.Layer) ([]byte, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read layer: %w", err)
	}
	return b, nil
}
