// Command version prints the version a product build stamped in.
package main

import (
	"fmt"

	"github.com/sluicemesh/sluice/internal/buildinfo"
)

func main() { fmt.Println(buildinfo.Version) }
