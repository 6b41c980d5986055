package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSmoke runs the whole harness with tiny counts so it doesn't rot. It
// checks that every part ran and produced numbers, never how fast they are.
func TestSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and runs sluice-agent")
	}
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	res, err := run(config{smoke: true, out: out, rules: 3, pods: 12, e2ePods: 8, small: 4, probes: 3, churn: 8, execs: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.rules {
		if len(s.d) == 0 || s.p50() <= 0 {
			t.Errorf("rules %s: no samples", s.name)
		}
	}
	sc, ch := res.scale, res.churn
	for _, s := range []series{sc.loopback, sc.sluiceAdd, sc.chain, sc.addSmall, sc.addLarge, sc.delAll, ch.add, ch.del} {
		if len(s.d) == 0 || s.p50() <= 0 {
			t.Errorf("%s: no samples", s.name)
		}
	}
	if ch.errors != 0 {
		t.Errorf("churn errors: %d, first %v", ch.errors, ch.firstErr)
	}
	if sc.rssKiB <= 0 || sc.restart <= 0 || res.footprint.sizes["sluice"] <= 0 {
		t.Errorf("scale/footprint numbers missing: %+v", sc)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Machine", "## Results against the goals", "benchmarks/rules.svg"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, plot := range []string{"rules.svg", "add.svg"} {
		if st, err := os.Stat(filepath.Join(filepath.Dir(out), "benchmarks", plot)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", plot, err)
		}
	}
}
