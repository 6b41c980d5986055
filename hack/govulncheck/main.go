// Command govulncheck-gate reads `govulncheck -format json` on stdin and
// fails when our code calls a vulnerable function, the standard library's
// included: the toolchain is pinned (GOTOOLCHAIN in the Makefile, go.mod,
// Dockerfile GO_VERSION), so a finding there is fixed by moving the pin, and
// a privileged node agent must not ship one.
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
	called, fixed, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "govulncheck-gate: decode:", err)
		os.Exit(2)
	}
	if report(os.Stdout, called, fixed) > 0 {
		os.Exit(1)
	}
}

// read collects the findings whose innermost frame names a function: one
// our code reaches. Module- and package-level findings are not.
func read(r io.Reader) (map[string]frame, map[string]string, error) {
	dec := json.NewDecoder(r)
	called := map[string]frame{} // osv id → the vulnerable frame
	fixed := map[string]string{}
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return called, fixed, nil
		}
		if err != nil {
			return nil, nil, err
		}
		if f := m.Finding; f != nil && len(f.Trace) > 0 && f.Trace[0].Function != "" {
			called[f.OSV] = f.Trace[0]
			fixed[f.OSV] = f.FixedVersion
		}
	}
}

// report prints one line a called vulnerability and returns how many there
// are; every one fails the gate.
func report(w io.Writer, called map[string]frame, fixed map[string]string) int {
	ids := make([]string, 0, len(called))
	for id := range called {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	stdlib := 0
	for _, id := range ids {
		f := called[id]
		if f.Module == "stdlib" {
			stdlib++
		}
		fmt.Fprintf(w, "FAIL %s %s@%s (%s.%s), fixed in %s\n", id, f.Module, f.Version, f.Package, f.Function, fixed[id])
	}
	fmt.Fprintf(w, "govulncheck: %d called vulnerabilities, %d of them in the standard library (move GOTOOLCHAIN to fix those)\n", len(ids), stdlib)
	return len(ids)
}
