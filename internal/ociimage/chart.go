package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// A Helm chart as an OCI artifact: the manifest `helm push` makes of a
// packaged chart (helm's registry package), a config of the chart's
// metadata and one layer, the .tgz, so `helm pull oci://…` and
// `helm install oci://…` read it once it is copied to a registry. Helm
// stamps the push time into an annotation; this one has none, so the same
// chart always has the same digest, the one a release signs.
const (
	ChartConfigMediaType types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	ChartLayerMediaType  types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// ReproducibleChart rewrites a .tgz `helm package` wrote with every
// timestamp at the epoch (helm stamps the packing time into each tar
// header) and a plain gzip header, entries and contents unchanged.
func ReproducibleChart(tgz []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("chart package: %w", err)
	}
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("chart package: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("chart package: %s is not a regular file", h.Name)
		}
		hdr := &tar.Header{Name: h.Name, Mode: h.Mode, Size: h.Size, ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("chart package: %w", err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, fmt.Errorf("chart package %s: %w", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// ChartMetadata is a packaged chart's Chart.yaml, as JSON, and the fields
// the artifact's annotations take from it.
type ChartMetadata struct {
	JSON                                     []byte
	Name, Version, Description, Home, Source string
}

// ReadChartMetadata reads <chart>/Chart.yaml from a packaged chart.
func ReadChartMetadata(tgz []byte) (ChartMetadata, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return ChartMetadata{}, fmt.Errorf("chart package: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return ChartMetadata{}, errors.New("chart package: no Chart.yaml")
		}
		if err != nil {
			return ChartMetadata{}, fmt.Errorf("chart package: %w", err)
		}
		if strings.Count(h.Name, "/") != 1 || path.Base(h.Name) != "Chart.yaml" {
			continue
		}
		raw, err := io.ReadAll(tr)
		if err != nil {
			return ChartMetadata{}, fmt.Errorf("chart package: %w", err)
		}
		// Chart.yaml's keys are the JSON names of helm's chart.Metadata,
		// the config helm writes; sorted here, which helm does not mind.
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return ChartMetadata{}, fmt.Errorf("chart package: Chart.yaml: %w", err)
		}
		var m struct {
			Name, Version, Description, Home string
			Sources                          []string
		}
		if err := json.Unmarshal(js, &m); err != nil {
			return ChartMetadata{}, fmt.Errorf("chart package: Chart.yaml: %w", err)
		}
		if m.Name == "" || m.Version == "" {
			return ChartMetadata{}, errors.New("chart package: Chart.yaml has no name or version")
		}
		md := ChartMetadata{JSON: js, Name: m.Name, Version: m.Version, Description: m.Description, Home: m.Home}
		if len(m.Sources) > 0 {
			md.Source = m.Sources[0]
		}
		return md, nil
	}
}

// WriteChart writes a packaged chart as an OCI image layout in dir (a
// fresh directory: blobs/, index.json naming the chart's version,
// oci-layout), the form `oras cp --from-oci-layout dir:<version> …`
// copies to a registry unchanged. It returns the manifest's digest.
func WriteChart(dir string, tgz []byte) (v1.Hash, error) {
	md, err := ReadChartMetadata(tgz)
	if err != nil {
		return v1.Hash{}, err
	}
	config, layer := describeBlob(ChartConfigMediaType, md.JSON), describeBlob(ChartLayerMediaType, tgz)
	annotations := map[string]string{}
	for k, v := range map[string]string{
		"org.opencontainers.image.title":       md.Name,
		"org.opencontainers.image.version":     md.Version,
		"org.opencontainers.image.description": md.Description,
		"org.opencontainers.image.url":         md.Home,
		"org.opencontainers.image.source":      md.Source,
	} {
		if v != "" {
			annotations[k] = v
		}
	}
	raw, err := json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        config,
		Layers:        []v1.Descriptor{layer},
		Annotations:   annotations,
	})
	if err != nil {
		return v1.Hash{}, fmt.Errorf("chart manifest: %w", err)
	}
	top := describeBlob(types.OCIManifestSchema1, raw)
	index, err := indexJSON(top, map[string]string{"org.opencontainers.image.ref.name": md.Version})
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return v1.Hash{}, fmt.Errorf("chart layout: %w", err)
	}
	for _, e := range []entry{
		{"oci-layout", []byte(ociLayout)},
		{"index.json", index},
		{blob(top.Digest), raw},
		{blob(config.Digest), md.JSON},
		{blob(layer.Digest), tgz},
	} {
		p := filepath.Join(dir, e.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return v1.Hash{}, fmt.Errorf("chart layout: %w", err)
		}
		if err := os.WriteFile(p, e.body, 0o644); err != nil {
			return v1.Hash{}, fmt.Errorf("chart layout: %w", err)
		}
	}
	return top.Digest, nil
}

func describeBlob(mt types.MediaType, body []byte) v1.Descriptor {
	sum := sha256.Sum256(body)
	return v1.Descriptor{
		MediaType: mt,
		Size:      int64(len(body)),
		Digest:    v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sum)},
	}
}
