package lifecycletest

import (
	"path/filepath"
	"testing"
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
