package lifecycletest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"time"
)

// ResultsEnv names a JSON file the scenarios record their counts in, for
// hack/bench's node lifecycle section: one Results, one Count per mesh CNI
// and scenario. Each scenario reads the file, replaces its own row (same
// CNI and Scenario) and writes it back, so test/lifecycle (sluice) and
// test/peer (istio-cni), run one after the other with the same file, fill
// it side by side. Unset, nothing is written; the tests fail on their
// counts either way.
const ResultsEnv = "SLUICE_LIFECYCLE_RESULTS"

// The CNIs the rows are for.
const (
	CNISluice   = "sluice"    // sluice chained, installed with its chart
	CNIIstioCNI = "istio-cni" // Istio's istio-cni chart, sidecar mode
)

// The node-lifecycle scenarios the rows are for, and the baseline the
// extra start delays are measured against.
const (
	ScenarioBaseline = "baseline" // the same churn with no rollout, before it
	ScenarioOutage   = "outage"   // a node's agent gone (an image that is not there) under churn
	ScenarioUpgrade  = "upgrade"  // helm upgrade to another image under churn
	ScenarioRollback = "rollback" // helm rollback under the same churn
	ScenarioReboot   = "reboot"   // a node rebooted with pods running, probed throughout
	// ScenarioRebootRace: reboots of a node with 20 mesh pods while a
	// stand-in primary CNI rewrites its conflist throughout the boot.
	ScenarioRebootRace = "reboot-racing-primary"
	// ScenarioRebootRaceNRI: the same with sluice as the runtime's NRI
	// plugin, the validator requiring it (no conflist entry to race).
	ScenarioRebootRaceNRI = "reboot-racing-primary-nri"
	// ScenarioRebootBurst: a node full to maxPods with mesh pods rebooted.
	ScenarioRebootBurst = "reboot-burst"
)

// Results is the file ResultsEnv names.
type Results struct {
	Counts []Count `json:"counts"`
}

// Count is one scenario's outcome on one CNI. A duration is in
// nanoseconds.
type Count struct {
	CNI      string `json:"cni"`      // CNISluice or CNIIstioCNI
	Scenario string `json:"scenario"` // ScenarioBaseline, ScenarioOutage, ScenarioUpgrade, ScenarioRollback or ScenarioReboot
	Nodes    int    `json:"nodes"`    // nodes in the test cluster
	// Kinds are the pod kinds mixed: "sidecar", "ambient", "plain".
	Kinds []string `json:"kinds"`
	// Pods is how many pods the scenario followed: created during the
	// phase under churn, running across it for a reboot.
	Pods int `json:"pods"`
	// PodsPerNodeSecond is the churn's creation rate per node during the
	// phase (0 for a reboot).
	PodsPerNodeSecond float64 `json:"pods_per_node_second"`
	// Uncaptured is every pod that ran uncaptured: a mesh pod whose app's
	// first dial was not captured, plus (reboot) each distinct pod address
	// whose app answered the prober itself. UncapturedProbes is how many
	// prober connections an app answered; Probes how many were made.
	Uncaptured       int `json:"uncaptured"`
	UncapturedProbes int `json:"uncaptured_probes"`
	Probes           int `json:"probes"`
	// Overcaptured counts plain pods (no mesh metadata) whose app's first
	// dial was captured.
	Overcaptured int `json:"overcaptured"`
	// Failed counts pods that never ran (90 s from creation), or whose
	// app never dialled, or that were deleted under the test by anything
	// but the test (istio-cni's repair deletes a pod it finds uncaptured).
	Failed int `json:"failed"`
	// Evicted counts pods the node lifecycle controller or the kubelet
	// evicted (reason Evicted, or a DisruptionTarget condition).
	Evicted int `json:"evicted"`
	// StartP50NS and StartP99NS are create → every container running of
	// the phase's pods; for a reboot, the reboot's start → every container
	// running again. A pod that failed for good or was evicted before it
	// ran counts as Never, after every pod that started.
	StartP50NS int64 `json:"start_p50_ns"`
	StartP99NS int64 `json:"start_p99_ns"`
	// ExtraP50NS and ExtraP99NS are the phase's start p50 and p99 less
	// those of the same churn with no rollout (the baseline phase); 0 for
	// a reboot, which has no baseline, and for the baseline itself; Never
	// when the phase's is (see Extra).
	ExtraP50NS int64 `json:"extra_p50_ns"`
	ExtraP99NS int64 `json:"extra_p99_ns"`
	// Failures names each counted pod and why, for the reader.
	Failures []string `json:"failures,omitempty"`
}

// LoadResults reads a file ResultsEnv named.
func LoadResults(file string) (Results, error) {
	var r Results
	data, err := os.ReadFile(file)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("lifecycle results %s: %w", file, err)
	}
	return r, nil
}

// Find is the row for cni and scenario, if recorded.
func (r Results) Find(cni, scenario string) (Count, bool) {
	for _, c := range r.Counts {
		if c.CNI == cni && c.Scenario == scenario {
			return c, true
		}
	}
	return Count{}, false
}

// Record writes c into the file ResultsEnv names, replacing the row of
// the same CNI and scenario; nothing when it is unset.
func Record(c Count) error {
	file := os.Getenv(ResultsEnv)
	if file == "" {
		return nil
	}
	r, err := LoadResults(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	r.Counts = slices.DeleteFunc(r.Counts, func(o Count) bool { return o.CNI == c.CNI && o.Scenario == c.Scenario })
	r.Counts = append(r.Counts, c)
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}

// Never is the start delay of a pod that never started: failed for good
// or evicted before every container ran. In a phase's percentiles it ranks
// after every pod that started, so a CNI whose pods fail cannot show a
// shorter start delay than one whose pods wait and then start: leaving the
// failed pods out would reward failing them.
const Never = time.Duration(math.MaxInt64)

// StartPercentiles are the p50 and p99 (nearest rank) of the pods that
// started, taking starts, and never more that did not, each as Never.
func StartPercentiles(starts []time.Duration, never int) (p50, p99 time.Duration) {
	all := slices.Clone(starts)
	for range never {
		all = append(all, Never)
	}
	return Percentile(all, 50), Percentile(all, 99)
}

// Extra is a phase's start percentile over the baseline's. Never stays
// Never; over a baseline that is itself Never (its pods failed, so it says
// nothing of an undisturbed start) the phase's whole start counts as extra.
func Extra(phase, base time.Duration) time.Duration {
	switch {
	case phase == Never:
		return Never
	case base == Never:
		return phase
	}
	return phase - base
}

// Duration is a row's nanoseconds as a time.Duration.
func Duration(ns int64) time.Duration { return time.Duration(ns) }
