package main

import (
	"io"
	"strings"
	"testing"
)

// A called vulnerability in the standard library fails the gate like one in
// a required module: the toolchain is pinned, so the pin must move.
func TestStdlibFindingFails(t *testing.T) {
	in := `{"finding":{"osv":"GO-2026-0001","fixed_version":"v1.27.1","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"Serve"}]}}
{"finding":{"osv":"GO-2026-0002","trace":[{"module":"stdlib","package":"crypto/tls"}]}}`
	called, fixed, err := read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if n := report(&out, called, fixed); n != 1 {
		t.Fatalf("report = %d called vulnerabilities, want 1 (the package-level finding is not called)\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "FAIL GO-2026-0001 stdlib@v1.26.8 (net/http.Serve)") {
		t.Errorf("output does not name the finding:\n%s", out.String())
	}
}

func TestNoFindingPasses(t *testing.T) {
	called, fixed, err := read(strings.NewReader(`{"config":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := report(io.Discard, called, fixed); n != 0 {
		t.Fatalf("report = %d, want 0", n)
	}
}
