// Command pack builds the pause command and writes it as an image tar:
//
//	go run ./hack/pause/pack -o pause.tar
//	ctr -n k8s.io images import pause.tar
//
// Run it from inside the module; it shells out to `go build`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/sluicemesh/sluice/internal/ociimage"
)

func main() {
	out := flag.String("o", "pause.tar", "where to write the OCI archive")
	ref := flag.String("ref", ociimage.PauseRef, "the image's tag")
	flag.Parse()
	if err := ociimage.PackPause(context.Background(), *out, *ref); err != nil {
		fmt.Fprintln(os.Stderr, "pack:", err)
		os.Exit(1)
	}
	fmt.Println(*out, *ref)
}
