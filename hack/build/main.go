// Command build builds the product binaries, sluice and sluice-agent, the
// one way they are built everywhere (internal/productbuild): `make build`
// and the Dockerfile run it. With -sbom it also writes each binary's SBOM
// (internal/sbom) there, as <name>.cdx.json: the Dockerfile ships them in
// /sbom as `make image` does.
//
//	go run ./hack/build -version v1.2.3 -o bin
//	go run ./hack/build -goos linux -goarch arm64 -o /out -sbom /out/sbom
//
// The target platform is a flag, not GOOS/GOARCH in the environment,
// which would cross-compile this command itself under `go run`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicemesh/sluice/internal/productbuild"
	"github.com/sluicemesh/sluice/internal/sbom"
)

func main() {
	var opt productbuild.Options
	out := flag.String("o", "bin", "directory to write sluice and sluice-agent to")
	sbomDir := flag.String("sbom", "", "directory to write each binary's CycloneDX SBOM to (empty: none)")
	flag.StringVar(&opt.Version, "version", "dev", "the version stamped into the binaries")
	flag.StringVar(&opt.GOOS, "goos", "", "target OS (empty: the go command's default)")
	flag.StringVar(&opt.GOARCH, "goarch", "", "target architecture (empty: the go command's default)")
	flag.Parse()
	if err := run(opt, *out, *sbomDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(opt productbuild.Options, out, sbomDir string) error {
	targets := productbuild.Product()
	if err := productbuild.Build(context.Background(), opt, out, targets...); err != nil {
		return err
	}
	if sbomDir == "" {
		return nil
	}
	if err := os.MkdirAll(sbomDir, 0o755); err != nil {
		return fmt.Errorf("sbom: %w", err)
	}
	for _, t := range targets {
		if err := writeSBOM(filepath.Join(out, t.Name), t.Name, opt.Version, sbomDir); err != nil {
			return err
		}
	}
	return nil
}

func writeSBOM(bin, name, version, dir string) error {
	f, err := os.Open(bin)
	if err != nil {
		return fmt.Errorf("sbom: %w", err)
	}
	defer f.Close()
	doc, err := sbom.Generate(name, version, f)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, sbom.FileName(name)), doc, 0o644)
}
