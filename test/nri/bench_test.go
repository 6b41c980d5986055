package nri_test

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// runpSamplesEnv names a file BenchmarkRunp writes every pod's numbers to,
// as JSON (runpSamples): hack/bench reads it for percentiles, which the
// benchmark's own metrics (means) cannot give.
const runpSamplesEnv = "SLUICE_RUNP_SAMPLES"

// runpSamples is the file's schema; hack/bench has its mirror.
type runpSamples struct {
	Modes []runpModeSamples `json:"modes"`
}

type runpModeSamples struct {
	Mode string `json:"mode"`
	// RunpNS is each pod's runp, timed around crictl, in order.
	RunpNS []int64 `json:"runp_ns"`
	// AgentCPUNS is the agent's user+system time over each pod's life
	// (runp, stopp, rmp), in 10 ms clock ticks; empty without an agent.
	AgentCPUNS []int64 `json:"agent_cpu_ns,omitempty"`
}

// BenchmarkRunp is what capture adds to a pod's start: containerd's runp of
// a pause sandbox (bridge + host-local), timed around crictl, with no
// capture, with the chained CNI plugin (an exec per ADD), and with the NRI
// plugin (an in-process event); and the agent's CPU per pod over its whole
// life (run, stop, remove). The three modes are three nodes, each its own
// containerd, started once; every iteration runs one pod in each, in an
// order that rotates, so load on the machine falls on all three alike.
// Run it with a fixed count (pods per mode):
//
//	go test -run '^$' -bench Runp -benchtime 20x ./test/nri
func BenchmarkRunp(b *testing.B) {
	nstest.RequireRoot(b)
	modes := []*runpMode{newRunpMode(b, "none"), newRunpMode(b, "cni"), newRunpMode(b, "nri")}
	round := 0
	for b.Loop() {
		for i := range modes {
			modes[(round+i)%len(modes)].pod(b)
		}
		round++
	}
	var out runpSamples
	for _, m := range modes {
		b.ReportMetric(meanMS(m.samples.RunpNS), m.samples.Mode+"-runp-ms/op")
		b.ReportMetric(p50MS(m.samples.RunpNS), m.samples.Mode+"-runp-p50-ms")
		if m.a != nil {
			b.ReportMetric(meanMS(m.samples.AgentCPUNS), m.samples.Mode+"-agent-cpu-ms/pod")
		}
		out.Modes = append(out.Modes, m.samples)
	}
	writeRunpSamples(b, out)
}

// runpMode is one node running pods in one capture mode.
type runpMode struct {
	n       *node
	c       *containerd
	a       *agent // nil with no capture
	conf    string
	samples runpModeSamples
}

func newRunpMode(b *testing.B, mode string) *runpMode {
	m := &runpMode{n: newNode(b), samples: runpModeSamples{Mode: mode}}
	m.c = m.n.startContainerd(containerdOptions{chained: mode == "cni"})
	// Info, the default: debug logging would inflate the agent's CPU.
	switch mode {
	case "nri":
		m.a = m.n.startAgent("--log-level", "info")
	case "cni":
		m.a = m.n.startAgentNoWait("--trigger", "cni", "--install=false", "--log-level", "info")
		nstest.Eventually(b, 20*time.Second, func() bool {
			m.a.checkAlive()
			return m.a.Logs.Count("msg=serving") > 0
		}, "the agent never served:\n%s", m.a.Logs)
	}
	m.conf = m.c.podConfig("bench", "pod-"+mode, nil)
	return m
}

// pod runs, checks, stops and removes one sandbox. The enrolment check
// (a gRPC call to the agent) stays out of the agent's CPU for the pod.
func (m *runpMode) pod(b *testing.B) {
	cpu0 := m.a.cpu()
	start := time.Now()
	id := m.c.MustCrictl("runp", m.conf)
	m.samples.RunpNS = append(m.samples.RunpNS, int64(time.Since(start)))
	cpu := m.a.cpu() - cpu0
	if m.a != nil && m.n.enrolled(id) == nil {
		b.Fatalf("%s: sandbox %s not enrolled", m.samples.Mode, id)
	}
	cpu0 = m.a.cpu()
	m.c.MustCrictl("stopp", id)
	m.c.MustCrictl("rmp", id)
	if m.a != nil {
		m.samples.AgentCPUNS = append(m.samples.AgentCPUNS, int64(cpu+m.a.cpu()-cpu0))
	}
}

func writeRunpSamples(b *testing.B, s runpSamples) {
	path := os.Getenv(runpSamplesEnv)
	if path == "" {
		return
	}
	data, err := json.Marshal(s)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
}

func meanMS(ns []int64) float64 {
	if len(ns) == 0 {
		return 0
	}
	var sum int64
	for _, v := range ns {
		sum += v
	}
	return float64(sum) / 1e6 / float64(len(ns))
}

func p50MS(ns []int64) float64 {
	if len(ns) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ns))
	return float64(s[(len(s)-1)/2]) / 1e6
}

// cpu is the agent process's user+system time so far (clock ticks of
// 10 ms: a run of 20 pods resolves about half a millisecond per pod).
func (a *agent) cpu() time.Duration {
	if a == nil {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(a.Cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the whole line.
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
