// Command image packs the ztunnel binary hack/ztunnel/build.sh cached into
// an OCI archive beside it, the way hack/image packs sluice's (no Docker),
// and prints "<ref> <archive>" (`make ztunnel` runs it; test/mesh does the
// same on first use).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/sluicemesh/sluice/test/harness/meshtest"
)

func main() {
	a, err := meshtest.ZtunnelArchive(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "ztunnel image:", err)
		os.Exit(1)
	}
	fmt.Println(a.Ref, a.Path)
}
