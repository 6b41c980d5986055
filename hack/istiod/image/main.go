// Command image builds istiod (pilot-discovery, hack/istiod/build.sh) if it
// is not cached, packs it into an OCI archive beside the binary, the way
// hack/image packs sluice's (no Docker), and prints "<ref> <archive>"
// (`make istiod` runs it; test/mesh does the same on first use).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/sluicemesh/sluice/test/harness/meshtest"
)

func main() {
	a, err := meshtest.IstiodArchive(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "istiod image:", err)
		os.Exit(1)
	}
	fmt.Println(a.Ref, a.Path)
}
