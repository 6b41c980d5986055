// Command govulncheck-gate reads `govulncheck -format json` on stdin and
// fails when code calls a vulnerable function of a module we choose. The
// standard library's findings are printed but do not fail: the toolchain is
// the build machine's, and the release image pins its own Go version
// (Dockerfile GO_VERSION), which is where they are fixed.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
}

type message struct {
	Finding *struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	} `json:"finding"`
}

func main() {
	dec := json.NewDecoder(os.Stdin)
	called := map[string]frame{} // osv id → the vulnerable frame
	fixed := map[string]string{}
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "govulncheck-gate: decode:", err)
			os.Exit(2)
		}
		// A finding whose innermost frame names a function is one our
		// code reaches; module- and package-level ones are not.
		if f := m.Finding; f != nil && len(f.Trace) > 0 && f.Trace[0].Function != "" {
			called[f.OSV] = f.Trace[0]
			fixed[f.OSV] = f.FixedVersion
		}
	}
	ids := make([]string, 0, len(called))
	for id := range called {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	failed := 0
	for _, id := range ids {
		f := called[id]
		kind := "FAIL"
		if f.Module == "stdlib" {
			kind = "toolchain"
		} else {
			failed++
		}
		fmt.Printf("%-9s %s %s@%s (%s.%s), fixed in %s\n", kind, id, f.Module, f.Version, f.Package, f.Function, fixed[id])
	}
	fmt.Printf("govulncheck: %d called vulnerabilities in modules we require, %d in the toolchain's standard library\n", failed, len(ids)-failed)
	if failed > 0 {
		os.Exit(1)
	}
}
