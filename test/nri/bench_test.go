package nri_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/nstest"
)

// BenchmarkRunp is what capture adds to a pod's start: containerd's runp of
// a pause sandbox (bridge + host-local), timed around crictl, with no
// capture, with the chained CNI plugin (an exec per ADD), and with the NRI
// plugin (an in-process event); and the agent's CPU per pod, its whole
// life (run, stop, remove). Run it with a fixed count:
//
//	go test -run '^$' -bench Runp -benchtime 20x ./test/nri
func BenchmarkRunp(b *testing.B) {
	for _, mode := range []string{"none", "cni", "nri"} {
		b.Run(mode, func(b *testing.B) { benchRunp(b, mode) })
	}
}

func benchRunp(b *testing.B, mode string) {
	nstest.RequireRoot(b)
	n := newNode(b)
	c := n.startContainerd(containerdOptions{chained: mode == "cni"})
	var a *agent
	switch mode {
	case "nri":
		a = n.startAgent()
	case "cni":
		a = n.startAgentNoWait("--trigger", "cni", "--install=false")
		nstest.Eventually(b, 20*time.Second, func() bool {
			a.checkAlive()
			return a.logs.count("msg=serving") > 0
		}, "the agent never served:\n%s", a.logs)
	}
	conf := c.podConfig("bench", "pod", nil)
	cpu0 := a.cpu()
	var runp time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		id := c.mustCrictl("runp", conf)
		runp += time.Since(start)
		b.StopTimer()
		if a != nil && n.enrolled(id) == nil {
			b.Fatalf("%s: sandbox %s not enrolled", mode, id)
		}
		c.mustCrictl("stopp", id)
		c.mustCrictl("rmp", id)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(runp.Microseconds())/1000/float64(b.N), "runp-ms/op")
	if a != nil {
		b.ReportMetric(float64((a.cpu()-cpu0).Microseconds())/1000/float64(b.N), "agent-cpu-ms/pod")
	}
}

// cpu is the agent process's user+system time so far (clock ticks of
// 10 ms: a run of 20 pods resolves about half a millisecond per pod).
func (a *agent) cpu() time.Duration {
	if a == nil {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(a.cmd.Process.Pid) + "/stat")
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
