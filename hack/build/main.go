// Command build builds the product binaries, sluice and sluice-agent, the
// one way they are built everywhere (internal/productbuild): `make build`
// and the Dockerfile run it.
//
//	go run ./hack/build -version v1.2.3 -o bin
//	go run ./hack/build -goos linux -goarch arm64 -o /out
//
// The target platform is a flag, not GOOS/GOARCH in the environment,
// which would cross-compile this command itself under `go run`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/sluicemesh/sluice/internal/productbuild"
)

func main() {
	var opt productbuild.Options
	out := flag.String("o", "bin", "directory to write sluice and sluice-agent to")
	flag.StringVar(&opt.Version, "version", "dev", "the version stamped into the binaries")
	flag.StringVar(&opt.GOOS, "goos", "", "target OS (empty: the go command's default)")
	flag.StringVar(&opt.GOARCH, "goarch", "", "target architecture (empty: the go command's default)")
	flag.Parse()
	if err := productbuild.Build(context.Background(), opt, *out, productbuild.Product()...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
