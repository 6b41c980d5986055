// Command image writes the project's images as OCI archives, with no
// Docker engine (`make image` runs it; internal/ociimage builds them), and
// with -chart the chart as an OCI artifact (`make dist`):
//
//	go run ./hack/image -bin bin -version v1.2.3 -o bin/image [-chart deploy/helm/sluice]
//
// sluice.tar is the product image for every -platforms entry (amd64 and
// arm64), an OCI image index over one image each: it builds each
// platform's binaries the product's way into -bin/<os>-<arch>/, and writes
// the SBOMs the images hold to -bin/sbom/<os>-<arch>/ as well.
// sluice-testapp.tar and sluice-pause.tar are the node tests' images, for
// this machine. With -chart the chart is packaged by helm
// (hack/helm/helm.sh) into -bin/<name>-<version>.tgz, its timestamps made
// fixed, and written as an OCI image layout in -bin/chart/.
//
// Each line of output is "<ref> <digest> <file>": the digests a release
// signs (docs/install.md), the same for the same source and version.
// Load an image with `ctr -n k8s.io images import FILE` or
// `docker load -i FILE`.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sluicemesh/sluice/internal/ociimage"
)

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin", "directory for each platform's binaries, their SBOMs and the packaged chart")
	flag.StringVar(&o.version, "version", "dev", "the image tag and its version label, and the chart's appVersion")
	flag.StringVar(&o.out, "o", "bin/image", "directory to write the archives to")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "the product image's platforms, comma-separated os/arch")
	flag.StringVar(&o.chart, "chart", "", "the chart's directory, to package it as an OCI artifact (empty: no chart)")
	flag.StringVar(&o.helm, "helm", "hack/helm/helm.sh", "the helm command (the script builds helm on first use)")
	flag.Parse()
	o.platforms = strings.Split(*platforms, ",")
	o.stdout = os.Stdout
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

type options struct {
	bin, version, out, chart, helm string
	platforms                      []string
	stdout                         io.Writer
}

func run(ctx context.Context, o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	arts, err := product(ctx, o.bin, o.version, o.out, o.platforms)
	if err != nil {
		return err
	}
	tests, err := testImages(ctx, o.version, o.out)
	if err != nil {
		return err
	}
	arts = append(arts, tests...)
	if o.chart != "" {
		chart, err := packageChart(ctx, o.helm, o.chart, o.version, o.bin)
		if err != nil {
			return err
		}
		arts = append(arts, chart...)
	}
	for _, a := range arts {
		fmt.Fprintln(o.stdout, a.ref, a.digest, a.path)
	}
	return nil
}

// artifact is one line of output.
type artifact struct{ ref, digest, path string }

// testImages are the node tests' images, for this machine.
func testImages(ctx context.Context, version, out string) ([]artifact, error) {
	app, err := ociimage.GoBinary(ctx, ociimage.TestAppPackage, version)
	if err != nil {
		return nil, err
	}
	testApp, err := ociimage.TestApp(app)
	if err != nil {
		return nil, err
	}
	pauseBin, err := ociimage.GoBinary(ctx, ociimage.PausePackage, version)
	if err != nil {
		return nil, err
	}
	pauseImg, err := ociimage.Pause(pauseBin)
	if err != nil {
		return nil, err
	}
	var arts []artifact
	for _, im := range []struct {
		file, ref string
		img       v1.Image
	}{{"sluice-testapp.tar", ociimage.TestAppRef, testApp}, {"sluice-pause.tar", ociimage.PauseRef, pauseImg}} {
		p := filepath.Join(out, im.file)
		d, err := ociimage.WriteOCI(p, im.ref, im.img)
		if err != nil {
			return nil, err
		}
		arts = append(arts, artifact{im.ref, d.String(), p})
	}
	return arts, nil
}
