package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// nriResult is what capture adds to containerd's runp: test/nri's
// BenchmarkRunp, run as a subprocess so its harness (a node per mode,
// containerd 2.x, crictl, the pause image) stays the one the NRI tests
// use. Pods alternate between the modes, one each per round.
type nriResult struct {
	none, cni, nri series // runp per pod
	cniCPU, nriCPU series // the agent's CPU over each pod's life
	err            error  // not measured, and why
}

// runpSamplesEnv and runpSamples mirror test/nri/bench_test.go.
const runpSamplesEnv = "SLUICE_RUNP_SAMPLES"

type runpSamples struct {
	Modes []struct {
		Mode       string  `json:"mode"`
		RunpNS     []int64 `json:"runp_ns"`
		AgentCPUNS []int64 `json:"agent_cpu_ns"`
	} `json:"modes"`
}

// benchNRI runs pods pods per mode. A failure is the section's, not the
// run's: the report says it was not measured and why.
func benchNRI(tmp string, pods int, smoke bool, cl *cleanups) *nriResult {
	res := &nriResult{}
	root, err := moduleRoot()
	if err != nil {
		res.err = err
		return res
	}
	// The smoke run does not spend minutes building containerd.
	if smoke && !containerdBuilt(root) {
		res.err = fmt.Errorf("containerd not built: run make containerd")
		return res
	}
	file := filepath.Join(tmp, "runp.json")
	out, err := runTestBench(root, cl, "./test/nri", "BenchmarkRunp", pods, runpSamplesEnv+"="+file)
	if err != nil {
		res.err = err
		return res
	}
	if res.err = res.load(file); res.err != nil {
		res.err = fmt.Errorf("%v (output: %s)", res.err, tail(out, 15))
	}
	return res
}

func (r *nriResult) load(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("BenchmarkRunp wrote no samples: %w", err)
	}
	var s runpSamples
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("BenchmarkRunp's samples: %w", err)
	}
	runp := map[string]*series{"none": &r.none, "cni": &r.cni, "nri": &r.nri}
	cpu := map[string]*series{"cni": &r.cniCPU, "nri": &r.nriCPU}
	for _, m := range s.Modes {
		if runp[m.Mode] != nil {
			*runp[m.Mode] = nsSeries(m.RunpNS)
		}
		if cpu[m.Mode] != nil {
			*cpu[m.Mode] = nsSeries(m.AgentCPUNS)
		}
	}
	r.none.name, r.cni.name, r.nri.name = "no capture", "chained CNI plugin", "NRI plugin"
	r.cniCPU.name, r.nriCPU.name = "chained CNI plugin", "NRI plugin"
	if len(r.none.d) == 0 || len(r.cni.d) == 0 || len(r.nri.d) == 0 {
		return fmt.Errorf("BenchmarkRunp's samples lack a mode: %s", data)
	}
	return nil
}

func nsSeries(ns []int64) series {
	var s series
	for _, v := range ns {
		s.add(time.Duration(v))
	}
	return s
}

// containerdBuilt says whether hack/containerd/build.sh has its default
// version (or $CONTAINERD_VERSION) in its cache; the version is read from
// the script, which owns it.
func containerdBuilt(root string) bool {
	script, err := os.ReadFile(filepath.Join(root, "hack/containerd/build.sh"))
	if err != nil {
		return false
	}
	version := os.Getenv("CONTAINERD_VERSION")
	if m := regexp.MustCompile(`CONTAINERD_VERSION:-([^}]+)\}`).FindSubmatch(script); version == "" && m != nil {
		version = string(m[1])
	}
	cache := os.Getenv("SLUICE_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "sluice")
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "crictl"} {
		if _, err := os.Stat(filepath.Join(cache, "containerd", version, bin)); err != nil {
			return false
		}
	}
	return true
}

// mean of a series, 0 when empty.
func (s *series) mean() time.Duration {
	if len(s.d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range s.d {
		sum += d
	}
	return sum / time.Duration(len(s.d))
}

// added is what each capture mode adds to runp's p50 over no capture.
func (r *nriResult) added() (cni, nri time.Duration) {
	return r.cni.p50() - r.none.p50(), r.nri.p50() - r.none.p50()
}

// pairedAdded is the median over rounds of a mode's pod minus the
// no-capture pod of the same round: load that drifts over the run cancels.
func (r *nriResult) pairedAdded(mode series) time.Duration {
	var diff series
	for i := range min(len(mode.d), len(r.none.d)) {
		diff.add(mode.d[i] - r.none.d[i])
	}
	return diff.p50()
}

func msSigned(d time.Duration) string {
	return fmt.Sprintf("%+.1f ms", float64(d.Microseconds())/1000)
}

// writeNRIGoals is the NRI goal: the NRI mode's ADD cost is below the exec
// floor, so it adds less to runp than the chained plugin's exec does.
func writeNRIGoals(m *md, r *nriResult) {
	const goal = "NRI mode adds less to runp p50 than the chained CNI plugin (its ADD is below the exec floor)"
	if r == nil || r.err != nil {
		m.p("| %s | not measured: %v | %s |", goal, errOf(r), verdict(false))
		return
	}
	cni, nri := r.added()
	m.p("| %s | %s vs %s (runp p50: %s NRI, %s chained, %s no capture; section 7) | %s |", goal,
		msSigned(nri), msSigned(cni), ms(r.nri.p50()), ms(r.cni.p50()), ms(r.none.p50()), verdict(nri < cni))
	m.p("| (for reference) agent CPU per pod, NRI vs chained CNI (run, stop, remove) | %s vs %s | |",
		ms(r.nriCPU.mean()), ms(r.cniCPU.mean()))
}

func errOf(r *nriResult) error {
	if r == nil {
		return fmt.Errorf("not run")
	}
	return r.err
}

// writeNRI is section 7.
func writeNRI(m *md, r *nriResult) {
	m.p("### 7. NRI: what capture adds to runp")
	m.p("")
	if r == nil || r.err != nil {
		m.p("Not measured: `%v`", errOf(r))
		m.p("")
		return
	}
	cni, nri := r.added()
	m.p("| | n | runp p50 | runp p99 | p50 added over no capture | agent CPU per pod (mean) |")
	m.p("|---|---|---|---|---|---|")
	m.p("| %s | %d | %s | %s | — | — |", r.none.name, len(r.none.d), ms(r.none.p50()), ms(r.none.p99()))
	m.p("| %s | %d | %s | %s | %s | %s |", r.cni.name, len(r.cni.d), ms(r.cni.p50()), ms(r.cni.p99()), msSigned(cni), ms(r.cniCPU.mean()))
	m.p("| %s | %d | %s | %s | %s | %s |", r.nri.name, len(r.nri.d), ms(r.nri.p50()), ms(r.nri.p99()), msSigned(nri), ms(r.nriCPU.mean()))
	m.p("")
	m.p("`test/nri`'s `BenchmarkRunp`, run by the harness (`go test -bench Runp -benchtime %dx ./test/nri`", len(r.none.d))
	m.p("with `%s` naming a file for every pod's numbers): three nodes, each a private network and mount", runpSamplesEnv)
	m.p("namespace with its own containerd 2.4.2 (`hack/containerd/build.sh`), a bridge + host-local conflist")
	m.p("and the project's pause image. No capture; the chained plugin last in that conflist (libcni execs")
	m.p("`sluice`, which calls the agent, `--trigger cni`); the NRI plugin (the agent enrols the pod in")
	m.p("containerd's RunPodSandbox event, no exec). Each round runs one pod in each mode, in an order that")
	m.p("rotates; runp is timed around `crictl runp` (crictl's own exec included, alike in every mode), and the")
	m.p("agent's CPU (user + sys from /proc, 10 ms ticks) over each pod's runp, stopp and rmp, with the agent at")
	m.p("`--log-level info`. The check that the agent enrolled the pod (a gRPC call) is outside both.")
	m.p("")
	m.p("Paired by round instead (each pod minus the no-capture pod of its round, median), the added time is")
	m.p("%s chained and %s NRI.", msSigned(r.pairedAdded(r.cni)), msSigned(r.pairedAdded(r.nri)))
	m.p("")
	m.p("![runp latency](benchmarks/nri.svg)")
	m.p("")
}

func nriPlot(path string, r *nriResult) error {
	if r == nil || r.err != nil {
		return nil
	}
	return cdfPlot("containerd runp of a pause sandbox: no capture, chained CNI plugin, NRI plugin", path, r.none, r.cni, r.nri)
}
