package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// lifecycleResult is section 8, node lifecycle: pod start (create →
// Ready) on the test node with no mesh CNI, with istio-cni, with sluice
// chained and with sluice's NRI trigger; and the node suites' scenario
// counts for sluice and istio-cni side by side. test/peer's
// BenchmarkPodStart measures pod start as a subprocess, so its cluster
// (test/harness/nodetest, Istio's istio-cni chart, sluice's chart) is the one
// the node suites use.
type lifecycleResult struct {
	none, istio, sluice, nri series
	// create → the app's first log line: resolves what Ready's relist
	// steps hide. Empty in samples from before it was recorded.
	appNone, appIstio, appSluice, appNRI series
	err                                  error // pod start not measured, and why
	scenarios                            *scenarioResult
}

// podStartSamplesEnv and podStartSamples mirror test/peer/podstart_test.go.
const podStartSamplesEnv = "SLUICE_PODSTART_SAMPLES"

type podStartSamples struct {
	Modes []struct {
		Mode    string  `json:"mode"`
		StartNS []int64 `json:"start_ns"`
		AppNS   []int64 `json:"app_ns"`
	} `json:"modes"`
}

// benchLifecycle times pods pods per mode and, with scenarios, runs the
// node suites for their counts. A failure is the section's, not the
// run's. The smoke run skips it: a test cluster takes a minute.
func benchLifecycle(tmp string, pods int, scenarios bool, churn time.Duration, smoke bool, cl *cleanups) *lifecycleResult {
	res := &lifecycleResult{}
	if smoke {
		res.err = fmt.Errorf("not run by -smoke (a test cluster takes a minute to start)")
		res.scenarios = benchScenarios("", tmp, churn, smoke, cl)
		return res
	}
	root, err := moduleRoot()
	if err != nil {
		res.err = err
		return res
	}
	res.podStart(root, tmp, pods, cl)
	if scenarios {
		res.scenarios = benchScenarios(root, tmp, churn, smoke, cl)
	} else {
		res.scenarios = &scenarioResult{err: fmt.Errorf("not run (-lifecycle-scenarios=false)")}
	}
	return res
}

func (res *lifecycleResult) podStart(root, tmp string, pods int, cl *cleanups) {
	file := filepath.Join(tmp, "podstart.json")
	out, err := runTestBench(root, cl, "./test/peer", "BenchmarkPodStart", pods, podStartSamplesEnv+"="+file)
	if err != nil {
		res.err = err
		return
	}
	if res.err = res.load(file); res.err != nil {
		res.err = fmt.Errorf("%v (output: %s)", res.err, tail(out, 15))
	}
}

func (r *lifecycleResult) load(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("BenchmarkPodStart wrote no samples: %w", err)
	}
	var s podStartSamples
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("BenchmarkPodStart's samples: %w", err)
	}
	byMode := map[string][2]*series{"none": {&r.none, &r.appNone}, "istio-cni": {&r.istio, &r.appIstio},
		"sluice": {&r.sluice, &r.appSluice}, "sluice-nri": {&r.nri, &r.appNRI}}
	for _, m := range s.Modes {
		if to, ok := byMode[m.Mode]; ok {
			*to[0], *to[1] = nsSeries(m.StartNS), nsSeries(m.AppNS)
		}
	}
	r.none.name, r.istio.name, r.sluice.name, r.nri.name = "no mesh CNI", "istio-cni (sidecar mode)", "sluice chained", "sluice NRI"
	if len(r.none.d) == 0 || len(r.istio.d) == 0 || len(r.sluice.d) == 0 || len(r.nri.d) == 0 {
		return fmt.Errorf("BenchmarkPodStart's samples lack a mode: %s", data)
	}
	return nil
}

// added is a mode's pod start p50 over no mesh CNI's, as a fraction.
func (r *lifecycleResult) added(mode series) float64 {
	return addedOver(mode, r.none)
}

func addedOver(mode, none series) float64 {
	return float64(mode.p50()-none.p50()) / float64(none.p50())
}

// appTimed reports whether every mode has the app-start figure.
func (r *lifecycleResult) appTimed() bool {
	return len(r.appNone.d) > 0 && len(r.appIstio.d) > 0 && len(r.appSluice.d) > 0 && len(r.appNRI.d) > 0
}

// writeLifecycleGoals is the node-lifecycle goals: start time, and the counts
// side by side.
func writeLifecycleGoals(m *md, r *lifecycleResult) {
	writePodStartGoal(m, r)
	if r != nil {
		writeScenarioGoals(m, r.scenarios)
	}
}

func writePodStartGoal(m *md, r *lifecycleResult) {
	const goal = "chained sluice adds ≤ 5 % to pod start p50 (create → Ready) over no mesh CNI"
	if r == nil || r.err != nil {
		m.p("| %s | not measured: %v | %s |", goal, lifecycleErr(r), verdict(false))
		return
	}
	a := r.added(r.sluice)
	m.p("| %s | %+.1f %% (%s vs %s; section 8) | %s |", goal, 100*a, ms(r.sluice.p50()), ms(r.none.p50()), verdict(a <= 0.05))
	m.p("| (for reference) … sluice NRI over no mesh CNI | %+.1f %% (%s) | |", 100*r.added(r.nri), ms(r.nri.p50()))
	if !r.appTimed() {
		m.p("| … create → app started (resolves the relist's steps) | not measured | |")
		return
	}
	app := addedOver(r.appSluice, r.appNone)
	m.p("| … create → app started, chained sluice over no mesh CNI | %+.1f %% (%s vs %s) | %s |",
		100*app, ms(r.appSluice.p50()), ms(r.appNone.p50()), verdict(app <= 0.05))
	m.p("| (for reference) … sluice NRI, create → app started | %+.1f %% (%s) | |", 100*addedOver(r.appNRI, r.appNone), ms(r.appNRI.p50()))
}

func lifecycleErr(r *lifecycleResult) error {
	if r == nil {
		return fmt.Errorf("not run")
	}
	return r.err
}

// writeLifecycle is section 8.
func writeLifecycle(m *md, r *lifecycleResult) {
	m.p("### 8. Node lifecycle: pod start and the node suites' scenarios")
	m.p("")
	if r == nil || r.err != nil {
		m.p("Pod start not measured: `%v`", lifecycleErr(r))
		m.p("")
	} else {
		writePodStart(m, r)
	}
	if r != nil {
		writeScenarios(m, r.scenarios)
	}
}

func writePodStart(m *md, r *lifecycleResult) {
	m.p("| | n | create → Ready p50 | p99 | p50 over no mesh CNI | create → app started p50 | p99 | p50 over no mesh CNI |")
	m.p("|---|---|---|---|---|---|---|---|")
	apps := []series{r.appNone, r.appIstio, r.appSluice, r.appNRI}
	for i, s := range []series{r.none, r.istio, r.sluice, r.nri} {
		over, appOver := "—", "—"
		if i > 0 {
			over = fmt.Sprintf("%+.1f %%", 100*r.added(s))
			if r.appTimed() {
				appOver = fmt.Sprintf("%+.1f %%", 100*addedOver(apps[i], r.appNone))
			}
		}
		appP50, appP99 := "—", "—"
		if len(apps[i].d) > 0 {
			appP50, appP99 = ms(apps[i].p50()), ms(apps[i].p99())
		}
		m.p("| %s | %d | %s | %s | %s | %s | %s | %s |", s.name, len(s.d), ms(s.p50()), ms(s.p99()), over, appP50, appP99, appOver)
	}
	m.p("")
	m.p("Ready is seen only as the kubelet reports it, after its pod lifecycle relist (every second by")
	m.p("default), so create → Ready moves in steps of about that and hides a few ms. Create → app started")
	m.p("is the client's clock at create to containerd's timestamp of the app's first log line (the same")
	m.p("machine's clock, ms resolution): sandbox, its network (every CNI in the chain) and the app's start.")
	m.p("The kubelet's pod-start SLI histogram was not used: its buckets are 0.5 s and wider.")
	m.p("")
	m.p("`test/peer`'s `BenchmarkPodStart`, run by the harness (`go test -bench PodStart -benchtime %dx ./test/peer`", len(r.none.d))
	m.p("with `%s` naming a file for every pod's numbers): one test node (`test/harness/nodetest`:", podStartSamplesEnv)
	m.p("kubelet, containerd 2.x with NRI on and no validator, a bridge conflist at 1.1.0). The same sidecar pod")
	m.p("(the injector's annotation and an istio-proxy, no istio-validation, which fails with no mesh CNI) is")
	m.p("created, polled every 20 ms until Ready, deleted and gone before the next; first with no mesh CNI, then")
	m.p("with istio-cni installed by Istio's chart (built from the Istio module test/istio pins), then with")
	m.p("sluice's chart chained, then with its chart at `trigger=nri` (no conflist entry; the agent enrols the")
	m.p("pod in containerd's RunPodSandbox). After each sluice mode one more pod, not timed, must log its first")
	m.p("dial captured. The modes run one after another, not interleaved: drift over the section falls on them")
	m.p("unevenly.")
	m.p("")
}
