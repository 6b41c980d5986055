// Command image writes the project's images as OCI archives, with no
// Docker engine (`make image` runs it; internal/ociimage builds them):
//
//	go run ./hack/image -bin bin -version v1.2.3 -o bin/image
//
// sluice.tar is the product image from the binaries `make build` left in
// -bin; sluice-testapp.tar and sluice-pause.tar are the node tests' images,
// built here. Each line of output is "<ref> <digest> <file>"; the same
// binaries give the same digests. Load one with
// `ctr -n k8s.io images import FILE` or `docker load -i FILE`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sluicemesh/sluice/internal/ociimage"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding the sluice and sluice-agent binaries")
	version := flag.String("version", "dev", "the image tag and its version label")
	out := flag.String("o", "bin/image", "directory to write the archives to")
	flag.Parse()
	if err := run(context.Background(), *bin, *version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin, version, out string) error {
	plugin, err := os.ReadFile(filepath.Join(bin, "sluice"))
	if err != nil {
		return fmt.Errorf("read the plugin (run make build first): %w", err)
	}
	agent, err := os.ReadFile(filepath.Join(bin, "sluice-agent"))
	if err != nil {
		return fmt.Errorf("read the agent (run make build first): %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	sluice, err := ociimage.Sluice(plugin, agent, version)
	if err != nil {
		return err
	}
	if err := write(out, "sluice.tar", ociimage.SluiceRepo+":"+version, sluice); err != nil {
		return err
	}
	app, err := ociimage.GoBinary(ctx, ociimage.TestAppPackage, version)
	if err != nil {
		return err
	}
	testApp, err := ociimage.TestApp(app)
	if err != nil {
		return err
	}
	if err := write(out, "sluice-testapp.tar", ociimage.TestAppRef, testApp); err != nil {
		return err
	}
	pauseBin, err := ociimage.GoBinary(ctx, ociimage.PausePackage, version)
	if err != nil {
		return err
	}
	pauseImg, err := ociimage.Pause(pauseBin)
	if err != nil {
		return err
	}
	return write(out, "sluice-pause.tar", ociimage.PauseRef, pauseImg)
}

func write(dir, file, ref string, img v1.Image) error {
	path := filepath.Join(dir, file)
	digest, err := ociimage.WriteOCI(path, ref, img)
	if err != nil {
		return err
	}
	fmt.Println(ref, digest, path)
	return nil
}
