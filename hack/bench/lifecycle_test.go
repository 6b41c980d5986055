package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A samples file as test/peer's BenchmarkPodStart wrote it (-benchtime 3x)
// becomes section 8 and its goal row; one lacking a mode is an error.
func TestLifecycleSamples(t *testing.T) {
	const real = `{"modes":[{"mode":"none","start_ns":[804330679,804273564,803104009]},` +
		`{"mode":"istio-cni","start_ns":[1404396200,1020548526,1205602404]},` +
		`{"mode":"sluice","start_ns":[1404292326,1004333269,1803613380]}]}`
	file := filepath.Join(t.TempDir(), "podstart.json")
	if err := os.WriteFile(file, []byte(real), 0o644); err != nil {
		t.Fatal(err)
	}
	var r lifecycleResult
	if err := r.load(file); err != nil {
		t.Fatal(err)
	}
	if len(r.none.d) != 3 || r.sluice.p50() != 1404292326 || r.istio.p50() != 1205602404 {
		t.Fatalf("loaded %v / %v / %v", r.none.d, r.istio.d, r.sluice.d)
	}
	m := &md{}
	writeLifecycleGoals(m, &r)
	writeLifecycle(m, &r)
	for _, want := range []string{"| sluice chained | 3 | ", "+74.6 %", "missed"} {
		if !strings.Contains(m.b.String(), want) {
			t.Errorf("section lacks %q:\n%s", want, m.b.String())
		}
	}
	if err := os.WriteFile(file, []byte(`{"modes":[{"mode":"none","start_ns":[1]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (&lifecycleResult{}).load(file); err == nil {
		t.Error("samples without istio-cni and sluice loaded")
	}
}
