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
	top, blobs, err := imageBlobs(img)
	if err != nil {
		return v1.Hash{}, err
	}
	return writeArchive(path, tag, top, blobs)
}

// WriteOCIIndex writes a multi-platform image as an OCI archive at path:
// index.json names ref and points at idx, whose blob comes first, then
// each platform's manifest, config and layers. It returns idx's digest,
// the one a registry serves the image under for every platform.
func WriteOCIIndex(path, ref string, idx v1.ImageIndex) (v1.Hash, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image ref %q: %w", ref, err)
	}
	raw, err := idx.RawManifest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image index: %w", err)
	}
	top, err := describe(idx, raw)
	if err != nil {
		return v1.Hash{}, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image index: %w", err)
	}
	blobs := []entry{{blob(top.Digest), raw}}
	seen := map[string]bool{blob(top.Digest): true}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("image index: %s: %w", d.Digest, err)
		}
		_, bs, err := imageBlobs(img)
		if err != nil {
			return v1.Hash{}, err
		}
		for _, b := range bs {
			if !seen[b.name] {
				seen[b.name] = true
				blobs = append(blobs, b)
			}
		}
	}
	return writeArchive(path, tag, top, blobs)
}

// writeArchive writes the archive: the layout marker, index.json naming
// tag and pointing at top, then the blobs in their order.
func writeArchive(path string, tag name.Tag, top v1.Descriptor, blobs []entry) (v1.Hash, error) {
	index, err := indexJSON(top, map[string]string{
		// containerd's import names the image by the first, Docker's
		// load by the second.
		"io.containerd.image.name":          tag.Name(),
		"org.opencontainers.image.ref.name": tag.Name(),
	})
	if err != nil {
		return v1.Hash{}, err
	}
	entries := append([]entry{{"oci-layout", []byte(ociLayout)}, {"index.json", index}}, blobs...)
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
	return top.Digest, nil
}

const ociLayout = `{"imageLayoutVersion":"1.0.0"}`

type entry struct {
	name string
	body []byte
}

// manifest is what an image and an index share for describing
// themselves.
type manifest interface {
	Digest() (v1.Hash, error)
	MediaType() (types.MediaType, error)
}

// describe is the descriptor of m, whose raw manifest is raw.
func describe(m manifest, raw []byte) (v1.Descriptor, error) {
	digest, err := m.Digest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("manifest digest: %w", err)
	}
	mt, err := m.MediaType()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("manifest media type: %w", err)
	}
	return v1.Descriptor{MediaType: mt, Digest: digest, Size: int64(len(raw))}, nil
}

// imageBlobs are an image's descriptor and its blobs: the manifest, the
// config and the layers.
func imageBlobs(img v1.Image) (v1.Descriptor, []entry, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("image manifest: %w", err)
	}
	top, err := describe(img, raw)
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("image config: %w", err)
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("image config digest: %w", err)
	}
	entries := []entry{{blob(top.Digest), raw}, {blob(cfgName), config}}
	layers, err := img.Layers()
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("image layers: %w", err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return v1.Descriptor{}, nil, fmt.Errorf("layer digest: %w", err)
		}
		body, err := readAll(l)
		if err != nil {
			return v1.Descriptor{}, nil, err
		}
		entries = append(entries, entry{blob(d), body})
	}
	return top, entries, nil
}

// indexJSON is a layout's index.json: the one manifest top, annotated.
func indexJSON(top v1.Descriptor, annotations map[string]string) ([]byte, error) {
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []map[string]any{{
			"mediaType":   top.MediaType,
			"digest":      top.Digest.String(),
			"size":        top.Size,
			"annotations": annotations,
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
