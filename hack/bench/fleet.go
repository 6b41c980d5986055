package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// fleetSize is section 9's fleet: test/fleet's SLUICE_FLEET_* sizes. The
// agents start at pods and 100 namespaces, then the fleet grows to
// grownPods and namespaces (issue 36: 1,000 to 50,000 pods, 100 to 10,000
// namespaces, 5,000 nodes).
type fleetSize struct{ nodes, pods, grownPods, namespaces, agents int }

func (s fleetSize) env() []string {
	return []string{
		fmt.Sprintf("SLUICE_FLEET_NODES=%d", s.nodes), fmt.Sprintf("SLUICE_FLEET_PODS=%d", s.pods),
		fmt.Sprintf("SLUICE_FLEET_GROWN_PODS=%d", s.grownPods), fmt.Sprintf("SLUICE_FLEET_NAMESPACES=%d", s.namespaces),
		fmt.Sprintf("SLUICE_FLEET_AGENTS=%d", s.agents),
	}
}

// fleetResult is section 9: the figures test/fleet logged ("figure: what |
// value"), with the load the machine carried when it ended. The test's
// own targets are its pass or fail.
type fleetResult struct {
	size    fleetSize
	figures [][2]string
	load    string
	took    time.Duration
	err     error
}

func benchFleet(cl *cleanups, size fleetSize) *fleetResult {
	r := &fleetResult{size: size}
	root, err := moduleRoot()
	if err != nil {
		r.err = err
		return r
	}
	began := time.Now()
	out, err := runGoTest(root, cl, "./test/fleet", size.env(), "-v", "-run", "^TestFleetAPIFootprint$")
	r.took, r.load, r.err = time.Since(began), strings.TrimSpace(readFile("/proc/loadavg")), err
	r.figures = fleetFigures(out)
	return r
}

// fleetFigures picks the figure lines out of go test -v output.
func fleetFigures(out string) [][2]string {
	var figs [][2]string
	for _, line := range strings.Split(out, "\n") {
		_, fig, ok := strings.Cut(line, "figure: ")
		if !ok {
			continue
		}
		what, value, _ := strings.Cut(fig, " | ")
		figs = append(figs, [2]string{what, value})
	}
	return figs
}

// writeFleet is section 9; nil (the smoke run) writes nothing.
func writeFleet(m *md, r *fleetResult) {
	if r == nil {
		return
	}
	s := r.size
	m.p("### 9. A simulated fleet: what the agents ask of one API server")
	m.p("")
	m.p("`test/fleet`'s `TestFleetAPIFootprint` with %d Node objects, %d real agents (Kubernetes mode, ambient on, the", s.nodes, s.agents)
	m.p("shipped ClusterRole, each with the test app's ZDS stand-in), counted by the API server (audit log, its")
	m.p("watch-cache metric) and the kernel (bytes received, RSS). The agents start at %d pods and 100 namespaces;", s.pods)
	m.p("the fleet then grows to %d pods and %d namespaces, and every agent is restarted at once at both sizes.", s.grownPods, s.namespaces)
	m.p("Took %s; load at the end `%s`.", r.took.Round(time.Second), r.load)
	m.p("")
	if r.err != nil {
		m.p("The test failed (a target passed, or the run broke): `%s`", strings.ReplaceAll(r.err.Error(), "\n", " "))
		m.p("")
	}
	m.p("| what | measured |")
	m.p("|---|---|")
	for _, f := range r.figures {
		m.p("| %s | %s |", f[0], f[1])
	}
	m.p("")
}

// runFleetOnly is section 9 alone, written as runBurstOnly writes 3b.
func runFleetOnly(c config, res *results, cl *cleanups) (*results, error) {
	res.fleet = benchFleet(cl, c.fleet)
	if res.fleet.err != nil {
		fmt.Fprintln(os.Stderr, "bench: fleet:", res.fleet.err)
	}
	res.took = time.Since(res.started)
	m := &md{}
	m.p("<!-- go run ./hack/bench -fleet-only, %s, took %s -->", res.started.UTC().Format("2006-01-02 15:04 MST"), res.took.Round(time.Second))
	writeFleet(m, res.fleet)
	if res.out = c.out; res.out == "" {
		res.out = "/dev/stdout"
	}
	return res, os.WriteFile(res.out, []byte(m.b.String()), 0o644)
}
