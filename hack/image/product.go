package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sluicemesh/sluice/internal/ociimage"
	"github.com/sluicemesh/sluice/internal/productbuild"
	"github.com/sluicemesh/sluice/internal/sbom"
)

// product builds the product image for each platform ("os/arch") from
// binaries built into bin/<os>-<arch>/, writes the SBOMs the images hold
// beside them in bin/sbom/<os>-<arch>/, and writes the index over them as
// out/sluice.tar.
func product(ctx context.Context, bin, version, out string, platforms []string) ([]artifact, error) {
	var imgs []v1.Image
	for _, p := range platforms {
		img, err := platformImage(ctx, bin, version, p)
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	idx, err := ociimage.Index(imgs...)
	if err != nil {
		return nil, err
	}
	ref, path := ociimage.SluiceRepo+":"+version, filepath.Join(out, "sluice.tar")
	digest, err := ociimage.WriteOCIIndex(path, ref, idx)
	if err != nil {
		return nil, err
	}
	return []artifact{{ref, digest.String(), path}}, nil
}

func platformImage(ctx context.Context, bin, version, platform string) (v1.Image, error) {
	goos, goarch, ok := strings.Cut(platform, "/")
	if !ok || goos == "" || goarch == "" {
		return nil, fmt.Errorf("platform %q is not os/arch", platform)
	}
	dir := filepath.Join(bin, goos+"-"+goarch)
	opt := productbuild.Options{Version: version, GOOS: goos, GOARCH: goarch}
	if err := productbuild.Build(ctx, opt, dir, productbuild.Product()...); err != nil {
		return nil, err
	}
	plugin, err := os.ReadFile(filepath.Join(dir, productbuild.PluginName))
	if err != nil {
		return nil, err
	}
	agent, err := os.ReadFile(filepath.Join(dir, productbuild.AgentName))
	if err != nil {
		return nil, err
	}
	img, err := ociimage.Sluice(plugin, agent, version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", platform, err)
	}
	// The SBOMs beside the chart are the image's own files, so what a
	// reviewer reads in bin/ is what the image ships.
	sbomDir := filepath.Join(bin, "sbom", goos+"-"+goarch)
	if err := os.MkdirAll(sbomDir, 0o755); err != nil {
		return nil, err
	}
	for _, name := range []string{productbuild.PluginName, productbuild.AgentName} {
		doc, err := ociimage.FileOf(img, ociimage.SBOMDir+"/"+sbom.FileName(name))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(sbomDir, sbom.FileName(name)), doc, 0o644); err != nil {
			return nil, err
		}
	}
	return img, nil
}
