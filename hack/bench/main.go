// Command bench measures sluice against its peers on this machine, side by
// side in one run, and writes docs/benchmarks.md with the plots in
// docs/benchmarks/: every speed goal as a ratio from that run. Rule
// programming per pod (netlink vs nft -f vs iptables-restore), ADD through
// libcni vs the reference loopback plugin (standalone, and in Kubernetes
// mode on a real API server beside Istio's istio-cni), storms of
// simultaneous ADDs and DELs (quiet and with a CPU hog), CPU profiles of
// the agent and the plugin, scale to 5,000 enrolled pods, and what
// capture adds to containerd's runp (no capture, the chained plugin, the
// NRI plugin: test/nri's BenchmarkRunp as a subprocess), and pod start on
// the test node with no mesh CNI, istio-cni and sluice (test/peer's
// BenchmarkPodStart as a subprocess). `-smoke`
// runs every part with tiny counts and writes to a temp dir, so the
// harness is exercised by `go test` without timing anything there.
//
// It needs root: every network namespace it makes is a bind mount in a
// temp dir (in a mount namespace of its own under `go run`), removed on
// exit, on failure and on SIGINT/SIGTERM; each agent's health port binds
// inside a netns of its own. The machine's own network is never touched.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
)

type config struct {
	smoke    bool
	out      string // the markdown file
	rules    int    // fresh netns per rule tool
	pods     int    // pods enrolled in the scale run
	e2ePods  int    // of those, how many make the end-to-end ADD row
	small    int    // "few pods" for the scale comparison
	probes   int    // probe ADDs at few and at many pods
	churn    int    // simultaneous ADDs, then DELs
	rounds   int    // storms of each plugin, per load
	execs    int    // execs per binary for the footprint
	kubePods int    // API-server pods ADDed by each plugin in Kubernetes mode
	burst    int    // API-server pods ADDed all at once by each plugin (a rebooted node)
	nriPods  int    // pods per capture mode through containerd's runp
	lifePods int    // pods per mode in the node lifecycle section
	// lifeScenarios runs the node suites for section 8's counts;
	// lifeOnly runs section 8 alone and writes only it (see runLifecycleOnly).
	lifeScenarios, lifeOnly bool
	// burstOnly runs section 3b alone and writes only it (runBurstOnly).
	burstOnly bool
	// fleet is section 9's size; fleetOnly runs it alone (runFleetOnly).
	fleet     fleetSize
	fleetOnly bool
	// tracingOnly runs section 2c alone and writes only it (runTracingOnly).
	tracingOnly bool
	// lifeChurn is the node suites' churn pace across the cluster.
	lifeChurn time.Duration
	resync    time.Duration
}

func main() {
	c := config{}
	flag.BoolVar(&c.smoke, "smoke", false, "tiny counts, output to a temp dir: checks the harness runs, measures nothing useful")
	flag.StringVar(&c.out, "out", "", "markdown to write (default docs/benchmarks.md; with -smoke a temp dir)")
	flag.IntVar(&c.rules, "rules", 100, "fresh netns per rule-programming tool")
	flag.IntVar(&c.pods, "pods", 5000, "pods (netns) enrolled for the scale run")
	flag.IntVar(&c.e2ePods, "e2e-pods", 100, "ADDs in the standalone comparison with loopback")
	flag.IntVar(&c.churn, "churn", 200, "simultaneous ADDs, then DELs, in each storm")
	flag.IntVar(&c.rounds, "storm-rounds", 12, "storms of each plugin, quiet and with the hog, pooled")
	flag.IntVar(&c.execs, "execs", 200, "execs per binary in the footprint run")
	flag.IntVar(&c.kubePods, "kube-pods", 40, "API-server pods each plugin ADDs in the Kubernetes-mode comparison")
	flag.IntVar(&c.burst, "burst", 250, "API-server pods each plugin ADDs all at once, a rebooted node's burst (Kubernetes mode)")
	flag.IntVar(&c.nriPods, "nri-pods", 60, "pods per mode (no capture, chained CNI, NRI) through containerd's runp")
	flag.IntVar(&c.lifePods, "lifecycle-pods", 20, "pods per mode (no mesh CNI, istio-cni, sluice chained, sluice NRI) started on the test node")
	flag.BoolVar(&c.lifeScenarios, "lifecycle-scenarios", true, "run the node suites (test/lifecycle, test/peer) for section 8's scenario counts")
	flag.DurationVar(&c.lifeChurn, "lifecycle-churn", lifecycletest.FullChurnInterval, "the node suites' pace: a pod every this long across the two nodes (the default is one a second per node, which needs the 2-core machine to itself)")
	flag.BoolVar(&c.lifeOnly, "lifecycle-only", false, "run only section 8 and write its goal rows and section to -out (default stdout), to paste into docs/benchmarks.md")
	flag.BoolVar(&c.burstOnly, "burst-only", false, "run only section 3b (a rebooted node's burst) and write its goal rows and section to -out (default stdout), to paste into docs/benchmarks.md")
	flag.BoolVar(&c.fleetOnly, "fleet-only", false, "run only section 9 (a simulated fleet, test/fleet) and write it to -out (default stdout), to paste into docs/benchmarks.md")
	flag.IntVar(&c.fleet.nodes, "fleet-nodes", 5000, "Node objects in section 9's fleet")
	flag.IntVar(&c.fleet.pods, "fleet-pods", 1000, "pods in the fleet when its agents start")
	flag.IntVar(&c.fleet.grownPods, "fleet-grown-pods", 50000, "pods in the fleet once grown")
	flag.IntVar(&c.fleet.namespaces, "fleet-namespaces", 10000, "namespaces in the fleet once grown (it starts at 100)")
	flag.IntVar(&c.fleet.agents, "fleet-agents", 50, "real agents in the fleet, each for its own node")
	flag.BoolVar(&c.tracingOnly, "tracing-only", false, "run only section 2c (the ADD with the agent's tracing off and on, -e2e-pods each) and write it to -out (default stdout), to paste into docs/benchmarks.md")
	flag.DurationVar(&c.resync, "resync", time.Minute, "the agent's --resync-interval in the scale run (its default), measured once")
	flag.Parse()
	if c.lifeChurn <= 0 {
		// Refused here, not minutes later by the node suites' first scenario.
		fmt.Fprintf(os.Stderr, "bench: -lifecycle-churn %v: must be a positive duration\n", c.lifeChurn)
		os.Exit(2)
	}
	c.small, c.probes = 10, 50
	if c.smoke {
		c.rules, c.pods, c.e2ePods, c.small, c.probes, c.churn, c.rounds, c.execs, c.kubePods, c.nriPods, c.resync = 3, 12, 4, 4, 3, 8, 2, 5, 2, 1, time.Second
		c.burst = 6
		c.fleet = fleetSize{nodes: 50, pods: 100, grownPods: 300, namespaces: 200, agents: 2}
	}
	if os.Geteuid() == 0 && os.Getenv(privateMountsEnv) == "" {
		os.Exit(inPrivateMounts())
	}
	res, err := run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", res.out)
}

// privateMountsEnv marks the process re-exec'd in a mount namespace of its
// own: the thousands of netns bind mounts a full run makes (and anything a
// crash leaves) stay out of the machine's mount table.
const privateMountsEnv = "SLUICE_BENCH_PRIVATE_MOUNTS"

func inPrivateMounts() int {
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", os.Args[0]}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), privateMountsEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: unshare:", err)
		return 1
	}
	// Signals go to the child, which cleans up and exits.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sig {
			_ = cmd.Process.Signal(s)
		}
	}()
	if err := cmd.Wait(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "bench: unshare:", err)
		return 1
	}
	return 0
}

func startNRI(tmp string, c config, cl *cleanups) <-chan *nriResult {
	done := make(chan *nriResult, 1)
	go func() { done <- benchNRI(tmp, c.nriPods, c.smoke, cl) }()
	return done
}

// cleanups run once, at the end or on a signal, whichever comes first.
type cleanups struct {
	mu   sync.Mutex
	fns  []func()
	once sync.Once
}

func (c *cleanups) add(f func()) {
	c.mu.Lock()
	c.fns = append(c.fns, f)
	c.mu.Unlock()
}

func (c *cleanups) run() {
	c.once.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i := len(c.fns) - 1; i >= 0; i-- {
			c.fns[i]()
		}
	})
}

type results struct {
	out       string
	rules     []series
	storms    *storms
	kube      *kubeResult
	fleet     *fleetResult
	scale     *scaleResult
	footprint *footprint
	nri       *nriResult
	lifecycle *lifecycleResult
	verify    *verifyResult
	tracing   *tracingResult
	profile   *profile
	disk      series
	started   time.Time
	took      time.Duration
}

func run(c config) (*results, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("needs root: creates network namespaces and runs sluice-agent")
	}
	tmp, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return nil, err
	}
	var cl cleanups
	cl.add(func() { os.RemoveAll(tmp) })
	defer cl.run()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		if s, ok := <-sig; ok {
			fmt.Fprintln(os.Stderr, "bench: interrupted; cleaning up")
			cl.run()
			os.Exit(128 + int(s.(syscall.Signal)))
		}
	}()

	res := &results{started: time.Now(), out: c.out}
	if c.lifeOnly {
		return runLifecycleOnly(c, tmp, res, &cl)
	}
	if c.fleetOnly {
		return runFleetOnly(c, res, &cl)
	}
	if res.out == "" {
		res.out = "docs/benchmarks.md"
		if c.smoke {
			res.out = filepath.Join(tmp, "out", "benchmarks.md")
			// Smoke output is for the caller to look at, so not in tmp.
			dir, err := os.MkdirTemp("", "sluice-bench-smoke-")
			if err != nil {
				return nil, err
			}
			res.out = filepath.Join(dir, "benchmarks.md")
		}
	}
	nd, err := newNSDir(filepath.Join(tmp, "netns"))
	if err != nil {
		return nil, err
	}
	cl.add(nd.cleanupAll)
	if c.burstOnly {
		return runBurstOnly(c, tmp, nd, res, &cl)
	}
	if c.tracingOnly {
		return runTracingOnly(c, tmp, nd, res, &cl)
	}
	// The agent's journal lives on tmpfs by default (/var/run/sluice/state):
	// /dev/shm stands in for a node's /run.
	shm, err := os.MkdirTemp("/dev/shm", "sluice-bench-state-")
	if err != nil {
		return nil, err
	}
	cl.add(func() { os.RemoveAll(shm) })
	onTmpfs := func(n *node) { n.stateDir = filepath.Join(shm, filepath.Base(n.dir)) }

	step := func(what string) {
		fmt.Fprintf(os.Stderr, "bench: %s (%s)\n", what, time.Since(res.started).Round(time.Second))
	}
	step("building binaries")
	binDir := filepath.Join(tmp, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	b, err := buildAll(binDir)
	if err != nil {
		return nil, err
	}

	// The smoke run times nothing, so containerd's runp runs beside the
	// rest there (it keeps the smoke run under 30 s); a full run times it
	// alone, last.
	var nri <-chan *nriResult
	if c.smoke {
		step("NRI: runp with no capture, the chained plugin and the NRI plugin (in the background)")
		nri = startNRI(tmp, c, &cl)
	}

	step("verify pass over 250 pods (daemon/workloads' BenchmarkVerifyPass250)")
	res.verify = benchVerify(verifyPasses(c.smoke), &cl)

	step("plugin footprint")
	if res.footprint, err = benchFootprint(b, c.execs); err != nil {
		return nil, err
	}
	step("rule programming per pod")
	if res.rules, err = benchRules(nd, tmp, c.rules); err != nil {
		return nil, err
	}

	step("storms: loopback and sluice, quiet and with a CPU hog")
	n, err := newNode(nd, filepath.Join(tmp, "node-storm"), b)
	if err != nil {
		return nil, err
	}
	onTmpfs(n)
	cl.add(n.stopAgent)
	if _, err := n.startAgent(); err != nil {
		return nil, err
	}
	if res.storms, err = n.storms(c.churn, c.rounds, !c.smoke); err != nil {
		return nil, err
	}
	step("profiles: perf of the agent during a storm, the plugin's CPU, strace")
	if res.profile, err = n.profile(tmp, c.churn, c.execs); err != nil {
		return nil, err
	}
	n.stopAgent()

	step("Kubernetes mode: sluice, loopback and istio-cni on API-server pods")
	if res.kube, err = benchKube(nd, tmp, shm, b, c.kubePods, c.burst, c.smoke, &cl); err != nil {
		return nil, err
	}

	step(fmt.Sprintf("standalone ADD and scale to %d pods", c.pods))
	nd2, err := newNSDir(filepath.Join(tmp, "netns-scale"))
	if err != nil {
		return nil, err
	}
	cl.add(nd2.cleanupAll)
	n, err = newNode(nd2, filepath.Join(tmp, "node-scale"), b)
	if err != nil {
		return nil, err
	}
	onTmpfs(n)
	n.resync = c.resync
	cl.add(n.stopAgent)
	if _, err := n.startAgent(); err != nil {
		return nil, err
	}
	if res.scale, err = n.scale(c.pods, c.e2ePods, c.small, c.probes); err != nil {
		return nil, err
	}
	n.stopAgent()

	step("ADD with the journal on disk")
	n, err = newNode(nd2, filepath.Join(tmp, "node-disk"), b)
	if err != nil {
		return nil, err
	}
	cl.add(n.stopAgent)
	if _, err := n.startAgent(); err != nil {
		return nil, err
	}
	if res.disk, err = n.journalBound(min(c.e2ePods, 50)); err != nil {
		return nil, err
	}
	n.stopAgent()

	step("ADD with the agent's tracing off and on")
	if res.tracing, err = benchTracing(nd2, tmp, shm, b, c.e2ePods, &cl); err != nil {
		return nil, err
	}

	if nri == nil {
		step(fmt.Sprintf("NRI: runp of %d pods each with no capture, the chained plugin and the NRI plugin", c.nriPods))
		nri = startNRI(tmp, c, &cl)
	}
	res.nri = <-nri
	if res.nri.err != nil {
		fmt.Fprintln(os.Stderr, "bench: section 7 (NRI) not measured:", res.nri.err)
	}
	step(fmt.Sprintf("node lifecycle: %d pod starts each with no mesh CNI, istio-cni, sluice chained and sluice NRI on the test node; the node suites' counts", c.lifePods))
	res.lifecycle = benchLifecycle(tmp, c.lifePods, c.lifeScenarios, c.lifeChurn, c.smoke, &cl)
	// The fleet is a minute even at the smoke size, and make test runs it:
	// the smoke run leaves it out.
	if s := c.fleet; !c.smoke {
		step(fmt.Sprintf("fleet: %d nodes, %d agents, %d to %d pods, 100 to %d namespaces (test/fleet)", s.nodes, s.agents, s.pods, s.grownPods, s.namespaces))
		if res.fleet = benchFleet(&cl, s); res.fleet.err != nil {
			fmt.Fprintln(os.Stderr, "bench: section 9 (fleet):", res.fleet.err)
		}
	}
	reportLifecycleErrs(res.lifecycle)
	res.took = time.Since(res.started)

	step("writing " + res.out)
	if err := writeReport(c, res); err != nil {
		return nil, err
	}
	return res, nil
}

// runLifecycleOnly runs section 8 alone (pod start and, unless turned off,
// the node suites) and writes its goal rows and its section, to -out or
// stdout: the rest of docs/benchmarks.md comes from a full run, and the
// fragment is pasted into it.
func runLifecycleOnly(c config, tmp string, res *results, cl *cleanups) (*results, error) {
	res.lifecycle = benchLifecycle(tmp, c.lifePods, c.lifeScenarios, c.lifeChurn, c.smoke, cl)
	reportLifecycleErrs(res.lifecycle)
	res.took = time.Since(res.started)
	m := &md{}
	m.p("<!-- go run ./hack/bench -lifecycle-only, %s, took %s -->", res.started.UTC().Format("2006-01-02 15:04 MST"), res.took.Round(time.Second))
	m.p("| goal | measured | |")
	m.p("|---|---|---|")
	writeLifecycleGoals(m, res.lifecycle)
	m.p("")
	writeLifecycle(m, res.lifecycle)
	if res.out == "" {
		res.out = "/dev/stdout"
	}
	return res, os.WriteFile(res.out, []byte(m.b.String()), 0o644)
}

// runBurstOnly is section 3b alone: the Kubernetes-mode node, its agent,
// istio-cni and the burst, written as runLifecycleOnly writes section 8.
func runBurstOnly(c config, tmp string, nd *nsDir, res *results, cl *cleanups) (*results, error) {
	shm, err := os.MkdirTemp("/dev/shm", "sluice-bench-state-")
	if err != nil {
		return nil, err
	}
	cl.add(func() { os.RemoveAll(shm) })
	binDir := filepath.Join(tmp, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	b, err := buildAll(binDir)
	if err != nil {
		return nil, err
	}
	if res.kube, err = benchKube(nd, tmp, shm, b, 0, c.burst, c.smoke, cl); err != nil {
		return nil, err
	}
	if res.kube.istioErr != nil {
		fmt.Fprintln(os.Stderr, "bench: istio-cni not measured:", res.kube.istioErr)
	}
	res.took = time.Since(res.started)
	m := &md{}
	m.p("<!-- go run ./hack/bench -burst-only, %s, took %s -->", res.started.UTC().Format("2006-01-02 15:04 MST"), res.took.Round(time.Second))
	m.p("| goal | measured | |")
	m.p("|---|---|---|")
	writeBurstGoals(m, res.kube.burst)
	m.p("")
	writeBurst(m, res.kube.burst)
	// Never the full report's file: this is a section to paste in.
	if res.out = c.out; res.out == "" {
		res.out = "/dev/stdout"
	}
	return res, os.WriteFile(res.out, []byte(m.b.String()), 0o644)
}

func reportLifecycleErrs(r *lifecycleResult) {
	if r.err != nil {
		fmt.Fprintln(os.Stderr, "bench: section 8 (node lifecycle) pod start not measured:", r.err)
	}
	if s := r.scenarios; s != nil && s.err != nil {
		fmt.Fprintln(os.Stderr, "bench: section 8 (node lifecycle) scenario counts not measured:", s.err)
	}
}
