package lifecycletest

import (
	"path/filepath"
	"testing"
	"time"
)

// Record replaces its own row and keeps the other CNI's, so two suites
// fill one file side by side.
func TestRecordMergesRows(t *testing.T) {
	file := filepath.Join(t.TempDir(), "life.json")
	t.Setenv(ResultsEnv, file)
	for _, c := range []Count{
		{CNI: CNISluice, Scenario: ScenarioUpgrade, Pods: 1},
		{CNI: CNIIstioCNI, Scenario: ScenarioUpgrade, Pods: 2},
		{CNI: CNISluice, Scenario: ScenarioUpgrade, Pods: 3},
	} {
		if err := Record(c); err != nil {
			t.Fatal(err)
		}
	}
	r, err := LoadResults(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Counts) != 2 {
		t.Fatalf("rows = %+v, want 2", r.Counts)
	}
	if c, _ := r.Find(CNISluice, ScenarioUpgrade); c.Pods != 3 {
		t.Errorf("sluice row = %+v, want the last recorded (3 pods)", c)
	}
	if c, _ := r.Find(CNIIstioCNI, ScenarioUpgrade); c.Pods != 2 {
		t.Errorf("istio-cni row = %+v, want kept (2 pods)", c)
	}
}

// Unset, nothing is written and nothing fails.
func TestRecordUnset(t *testing.T) {
	t.Setenv(ResultsEnv, "")
	if err := Record(Count{CNI: CNISluice}); err != nil {
		t.Fatal(err)
	}
}

// A pod that never started ranks after every pod that started: a phase
// whose pods fail shows a longer delay than one whose pods wait, never a
// shorter one (leaving them out gave istio-cni's outage, 12 of 38 pods
// failed, a p99 of 0.8 s against sluice's 25 s of waiting pods).
func TestNeverStartedRanksLast(t *testing.T) {
	s := time.Second
	starts := []time.Duration{s, s, s, 2 * s}
	if p50, p99 := StartPercentiles(starts, 0); p50 != s || p99 != 2*s {
		t.Errorf("all started: p50 %v p99 %v, want 1s and 2s", p50, p99)
	}
	if p50, p99 := StartPercentiles(starts, 1); p50 != s || p99 != Never {
		t.Errorf("one of five never started: p50 %v p99 %v, want 1s and Never", p50, p99)
	}
	if p50, p99 := StartPercentiles(starts, 5); p50 != Never || p99 != Never {
		t.Errorf("five of nine never started: p50 %v p99 %v, want Never twice", p50, p99)
	}
	if p50, _ := StartPercentiles(nil, 0); p50 != 0 {
		t.Errorf("no pods: p50 %v, want 0", p50)
	}
	for _, c := range []struct{ phase, base, want time.Duration }{
		{3 * s, s, 2 * s}, {s, 3 * s, -2 * s}, {Never, s, Never}, {2 * s, Never, 2 * s}, {Never, Never, Never},
	} {
		if got := Extra(c.phase, c.base); got != c.want {
			t.Errorf("Extra(%v, %v) = %v, want %v", c.phase, c.base, got, c.want)
		}
	}
	if DelayText(int64(Never)) != "never" || DelayText(int64(1500*time.Millisecond)) != "1.5s" {
		t.Errorf("DelayText: %q, %q", DelayText(int64(Never)), DelayText(int64(1500*time.Millisecond)))
	}
}
