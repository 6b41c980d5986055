package ociimage

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sluicemesh/sluice/internal/productbuild"
	"github.com/sluicemesh/sluice/internal/sbom"
)

// The refs the images are tagged with. "localhost/" keeps a runtime from
// ever trying to pull them from a registry.
const (
	SluiceRepo = "localhost/sluice"
	TestAppRef = "localhost/sluice-testapp:test"
)

// The packages of the images' binaries.
const (
	PluginPackage  = productbuild.PluginPackage
	AgentPackage   = productbuild.AgentPackage
	TestAppPackage = "github.com/sluicemesh/sluice/test/node/testapp"
)

// GoBinary builds pkg the product's way (internal/productbuild) as a
// linux binary for this machine's architecture, the one the image
// declares, and returns its bytes. It runs `go build` in the current
// directory, which must lie inside this module.
func GoBinary(ctx context.Context, pkg, version string) ([]byte, error) {
	return productbuild.Binary(ctx, productbuild.Options{Version: version, GOOS: "linux", GOARCH: runtime.GOARCH}, pkg)
}

// SBOMDir is where the product image holds each binary's SBOM, as
// sbom.FileName(<binary>), so a scanner of the image finds what is in it.
const SBOMDir = "/sbom"

// Sluice is the product image: the agent, the plugin it installs from next
// to itself and their SBOMs, nothing else (the Dockerfile's final stage).
// It declares the architecture the binaries were built for, which both
// must share.
func Sluice(plugin, agent []byte, version string) (v1.Image, error) {
	arch, err := sameArch(plugin, agent)
	if err != nil {
		return nil, err
	}
	files := []File{
		{Path: "/usr/local/bin/" + productbuild.PluginName, Content: plugin},
		{Path: "/usr/local/bin/" + productbuild.AgentName, Content: agent},
	}
	for _, f := range files[:2] {
		doc, err := sbom.Generate(path.Base(f.Path), version, bytes.NewReader(f.Content))
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: SBOMDir + "/" + sbom.FileName(path.Base(f.Path)), Content: doc, Mode: 0o644})
	}
	return Build(files, Config{
		Entrypoint: []string{"/usr/local/bin/" + productbuild.AgentName},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "sluice",
			"org.opencontainers.image.description": "CNI node agent for service-mesh traffic capture",
			"org.opencontainers.image.source":      "https://github.com/sluicemesh/sluice",
			"org.opencontainers.image.licenses":    "Apache-2.0",
			"org.opencontainers.image.version":     version,
		},
		Arch: arch,
	})
}

// sameArch is the GOARCH both binaries were built for, from their build
// info; an image of binaries for two architectures would run on neither.
func sameArch(plugin, agent []byte) (string, error) {
	var archs [2]string
	for i, b := range [][]byte{plugin, agent} {
		bi, err := sbom.Read(bytes.NewReader(b))
		if err != nil {
			return "", err
		}
		for _, s := range bi.Settings {
			if s.Key == "GOARCH" {
				archs[i] = s.Value
			}
		}
		if archs[i] == "" {
			return "", fmt.Errorf("the binary's build info records no GOARCH")
		}
	}
	if archs[0] != archs[1] {
		return "", fmt.Errorf("the plugin is built for %s and the agent for %s", archs[0], archs[1])
	}
	return archs[0], nil
}

// Index is the multi-platform image: an OCI image index with one manifest
// per image, in the order given, each under the platform its config
// declares (what a runtime picks by).
func Index(imgs ...v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]bool{}
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("image index: %w", err)
		}
		p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
		if seen[p.String()] {
			return nil, fmt.Errorf("image index: two images for %s", p.String())
		}
		seen[p.String()] = true
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, nil
}

// TestApp is the node tests' application, stand-in proxy and stand-in
// ztunnel (test/node/testapp) at /testapp.
func TestApp(bin []byte) (v1.Image, error) {
	return Build([]File{{Path: "/testapp", Content: bin}}, Config{Entrypoint: []string{"/testapp"}})
}
