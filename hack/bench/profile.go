package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// profile is where the CPU of an ADD goes: a pprof CPU profile of the
// agent during a storm (the CPU under each function, callees included), the plugin's CPU per exec (rusage) next to loopback's and a Go
// hello-world's, and strace -c of one plugin ADD.
type profile struct {
	agentTop    []perfLine // sluice's own functions and the runtime's big ones
	agentCPU    time.Duration
	adds        int
	perfErr     error
	pluginCPU   map[string]time.Duration // per exec, p50 of user+sys
	pluginTop   []perfLine               // the plugin's main, merged over execs
	pluginErr   error
	straceTable string
}

type perfLine struct {
	children, self float64       // % of all samples: under the function, in it
	cum, flat      time.Duration // the same as CPU time
	symbol         string
}

// hops are the functions the per-hop table reports, in ADD order: the
// first one matched by prefix names the row.
var hops = []struct{ name, prefix string }{
	{"gRPC server (HTTP/2 framing, the handler's goroutine)", "google.golang.org/grpc.(*Server).handleStream"},
	{"rpc: the CNI Add handler, all of it", "github.com/sluicemesh/sluice/daemon/rpc.(*CNI).Add"},
	{"policy decision", "github.com/sluicemesh/sluice/daemon/policy."},
	{"workloads.Enroll, all of it", "github.com/sluicemesh/sluice/daemon/workloads.(*Store).Enroll"},
	{"netns open (podns)", "github.com/sluicemesh/sluice/daemon/podns."},
	{"ruleset build (redirect.Build)", "github.com/sluicemesh/sluice/daemon/redirect.Build"},
	{"journal write", "github.com/sluicemesh/sluice/daemon/workloads.(*Store).writeRecord"},
	{"netlink batch (kernel.Netlink.Apply)", "github.com/sluicemesh/sluice/daemon/redirect/kernel.apply"},
	{"  of which marshalling (google/nftables)", "github.com/sluicemesh/sluice/daemon/redirect/kernel/internal/nftnl.marshal"},
	{"DEL (workloads.Release)", "github.com/sluicemesh/sluice/daemon/workloads.(*Store).Release"},
	{"garbage collector (spread over ADDs)", "runtime.gcBgMarkWorker"},
}

// profileAgent restarts n's agent as the sluicebench build with a CPU
// profile, runs fn, stops the profile (SIGUSR1) and reads it with
// `go tool pprof -top -cum`. (perf cannot attach to a running process on
// this VM: it records no samples.)
func (n *node) profileAgent(dir string, fn func() error) ([]perfLine, error) {
	n.stopAgent()
	data := filepath.Join(dir, "agent.pprof")
	n.agentBin, n.env = "sluice-agent-prof", []string{"SLUICE_BENCH_CPUPROFILE=" + data}
	defer func() { n.agentBin, n.env = "", nil }()
	if _, err := n.startAgent(); err != nil {
		return nil, err
	}
	if err := fn(); err != nil {
		return nil, err
	}
	return n.stopProfile(data)
}

// stopProfile has the sluicebench agent write its CPU profile (SIGUSR1)
// to data and reads it with `go tool pprof -top -cum`.
func (n *node) stopProfile(data string) ([]perfLine, error) {
	if err := n.agent.Process.Signal(syscall.SIGUSR1); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(data + ".done"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the agent wrote no CPU profile in 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return pprofTop(filepath.Join(n.bins.dir, "sluice-agent-prof"), data)
}

// errNoSamples is a profile the sampler never hit: the run was shorter
// than its period (a smoke run's restart of a dozen pods).
var errNoSamples = errors.New("the profile has no samples")

// pprofTop reads a CPU profile of bin with `go tool pprof -top -cum`.
func pprofTop(bin, data string) ([]perfLine, error) {
	out, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=400", bin, data).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof: %w: %s", err, tail(string(out), 5))
	}
	if strings.Contains(string(out), " of 0 total") {
		return nil, errNoSamples
	}
	var lines []perfLine
	for _, l := range strings.Split(string(out), "\n") {
		// "     0.01s  0.29%  0.29%      2.50s 73.53%  runtime.goexit"
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") || !strings.HasSuffix(f[4], "%") {
			continue
		}
		flat, err1 := time.ParseDuration(f[0])
		cum, err2 := time.ParseDuration(f[3])
		cp, err3 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		fp, err4 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			continue
		}
		lines = append(lines, perfLine{children: cp, self: fp, cum: cum, flat: flat, symbol: strings.Join(f[5:], " ")})
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("go tool pprof: nothing parsed from:\n%s", tail(string(out), 12))
	}
	return lines, nil
}

// pluginHops are the functions of the plugin's main, in the order an ADD
// runs them.
var pluginHops = []struct{ name, prefix string }{
	{"main, all of it (after the runtime's start and the package inits)", "main.main"},
	{"config and prevResult parse (encoding/json)", "main.parseConfig"},
	{"request id (crypto/rand)", "main.newRequestID"},
	{"the Add call (grpccall: dial, write, read the answer)", "github.com/sluicemesh/sluice/internal/grpccall.Call"},
	{"  of which the dial (connect on the unix socket)", "net.(*Dialer).DialContext"},
	{"  of which the request's encoding (cniwire)", "github.com/sluicemesh/sluice/internal/cniwire.(*AddRequest).AppendWire"},
	{"  of which HPACK (x/net)", "golang.org/x/net/http2/hpack."},
	{"log lines (log/slog)", "log/slog.(*Logger).log"},
	{"result printed (encoding/json)", "github.com/containernetworking/cni/pkg/types.PrintResult"},
	{"garbage collector", "runtime.gcBgMarkWorker"},
}

// profilePlugin execs count ADDs of the sluicebench plugin, each writing a
// CPU profile at 10 kHz, and reads them merged.
func (n *node) profilePlugin(dir string, count int) ([]perfLine, error) {
	nsPath, err := n.nd.create("plugin-prof")
	if err != nil {
		return nil, err
	}
	defer n.nd.remove(nsPath)
	profDir := filepath.Join(dir, "plugin-prof")
	if err := os.MkdirAll(profDir, 0o700); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"bench","type":"sluice","socket":%q,"prevResult":%s}`, n.socket, prevResult)
	for i := range count {
		id := fmt.Sprintf("prof-%d", i)
		cmd := n.pluginCmd("sluice-prof", "ADD", id, nsPath, conf)
		cmd.Env = append(cmd.Env, "SLUICE_BENCH_PLUGINPROF="+profDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("sluice ADD (profiled): %v: %s", err, out)
		}
		if out, err := n.pluginCmd("sluice", "DEL", id, nsPath, conf).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("sluice DEL: %v: %s", err, out)
		}
	}
	files, _ := filepath.Glob(filepath.Join(profDir, "*.pprof"))
	if len(files) == 0 {
		return nil, fmt.Errorf("the profiled plugin wrote no profile")
	}
	merged := filepath.Join(dir, "plugin.pprof")
	out, err := exec.Command("go", append([]string{"tool", "pprof", "-proto", "-output", merged}, files...)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("merge plugin profiles: %w: %s", err, tail(string(out), 5))
	}
	return pprofTop(filepath.Join(n.bins.dir, "sluice-prof"), merged)
}

// restartHops are the functions of the start-up reconcile.
var restartHops = []struct{ name, prefix string }{
	{"reconcile, all of it", "github.com/sluicemesh/sluice/daemon/workloads.(*Store).reconcileOne"},
	{"ruleset build per record", "github.com/sluicemesh/sluice/daemon/redirect.Build"},
	{"kernel.Netlink.VerifySince, all of it", "github.com/sluicemesh/sluice/daemon/redirect/kernel.verifySince"},
	{"  nftables generation read (one GET)", "github.com/sluicemesh/sluice/daemon/redirect/kernel/internal/nftnl.(*socket).generation"},
	{"  table read back (google/nftables dumps), only where the generation moved", "github.com/sluicemesh/sluice/daemon/redirect/kernel/internal/nftnl.tableDrift"},
	{"  policy routes (rtnetlink rule and route dumps)", "github.com/sluicemesh/sluice/daemon/redirect/kernel.routeDrift"},
	{"  lo's addresses", "github.com/sluicemesh/sluice/daemon/redirect/kernel.loAddrDrift"},
	{"  lo's disable_ipv6 (a thread moved into the netns)", "github.com/sluicemesh/sluice/daemon/redirect/kernel.loIPv6Disabled"},
	{"journal load", "github.com/sluicemesh/sluice/daemon/workloads.(*Store).loadJournal"},
	{"journal write of a newly verified generation", "github.com/sluicemesh/sluice/daemon/workloads.(*Store).noteGen"},
	{"garbage collector", "runtime.gcBgMarkWorker"},
}

// hop is the line with the most CPU under a symbol with prefix.
func hop(lines []perfLine, prefix string) (perfLine, bool) {
	var best perfLine
	ok := false
	for _, l := range lines {
		if strings.HasPrefix(l.symbol, prefix) && l.cum > best.cum {
			best, ok = l, true
		}
	}
	return best, ok
}

// pluginCPU is the p50 CPU (user+sys, rusage) of n execs of each binary:
// sluice and loopback doing an ADD, hello doing nothing.
func (n *node) pluginCPU(count int) (map[string]time.Duration, error) {
	nsPath, err := n.nd.create("plugin-cpu")
	if err != nil {
		return nil, err
	}
	defer n.nd.remove(nsPath)
	type bin struct {
		key, name, conf string
		env             []string
		del             bool
	}
	sluiceConf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"bench","type":"sluice","socket":%q,"prevResult":%s}`, n.socket, prevResult)
	bins := []bin{
		{"hello", "hello", "{}", nil, false},
		{"loopback", "loopback", `{"cniVersion":"1.0.0","name":"bench-lo","type":"loopback"}`, nil, false},
		{"sluice", "sluice", sluiceConf, nil, true},
		{"sluice GOMAXPROCS=1", "sluice", sluiceConf, []string{"GOMAXPROCS=1"}, true},
	}
	samples := map[string]*series{}
	for _, b := range bins {
		samples[b.key] = &series{name: b.key}
	}
	for i := range count {
		for _, b := range bins {
			id := fmt.Sprintf("cpu-%d", i)
			cmd := n.pluginCmd(b.name, "ADD", id, nsPath, b.conf)
			cmd.Env = append(cmd.Env, b.env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("%s ADD: %v: %s", b.key, err, out)
			}
			samples[b.key].add(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime())
			if b.del {
				if out, err := n.pluginCmd(b.name, "DEL", id, nsPath, b.conf).CombinedOutput(); err != nil {
					return nil, fmt.Errorf("%s DEL: %v: %s", b.key, err, out)
				}
			}
		}
	}
	out := map[string]time.Duration{}
	for k, s := range samples {
		out[k] = s.p50()
	}
	return out, nil
}

// pluginCmd is the plugin exec'd as a runtime does: CNI_* env, config on
// stdin.
func (n *node) pluginCmd(name, verb, id, nsPath, conf string, wrap ...string) *exec.Cmd {
	argv := append(wrap, filepath.Join(n.bins.dir, name))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + nsPath, "CNI_IFNAME=eth0",
		"CNI_PATH=" + n.bins.dir, "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=" + id + ";K8S_POD_UID=uid-" + id,
		"PATH=" + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader(conf)
	return cmd
}

// straceADD is `strace -f -c` of one sluice ADD: the syscalls the plugin
// process makes, by time.
func (n *node) straceADD(dir string) (string, error) {
	nsPath, err := n.nd.create("strace")
	if err != nil {
		return "", err
	}
	defer n.nd.remove(nsPath)
	out := filepath.Join(dir, "plugin.strace")
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"bench","type":"sluice","socket":%q,"prevResult":%s}`, n.socket, prevResult)
	cmd := n.pluginCmd("sluice", "ADD", "strace-0", nsPath, conf, "strace", "-f", "-c", "-S", "time", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("strace sluice ADD: %v: %s", err, b)
	}
	_ = n.pluginCmd("sluice", "DEL", "strace-0", nsPath, conf).Run()
	b, err := os.ReadFile(out)
	if err != nil {
		return "", err
	}
	// The header, the top 12 syscalls and the total.
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 16 {
		lines = append(lines[:14], lines[len(lines)-2:]...)
	}
	return strings.Join(lines, "\n"), nil
}

// profile runs one more sluice storm under perf, then the plugin's CPU per
// exec and strace of one ADD, on n's agent.
func (n *node) profile(dir string, count, execs int) (*profile, error) {
	// pprof samples at 100 Hz: several storms give it enough samples.
	rounds := 5
	if count < 50 {
		rounds = 1
	}
	pr := &profile{adds: count * rounds}
	lines, err := n.profileAgent(dir, func() error {
		for range rounds {
			sr, err := n.storm("prof", n.sluice, count, n.agent.Process.Pid)
			if err != nil {
				return err
			}
			pr.agentCPU += sr.addCPU.process
		}
		return nil
	})
	if err != nil {
		pr.perfErr = err
	} else {
		pr.agentTop = lines
	}
	if pr.pluginCPU, err = n.pluginCPU(min(execs, 100)); err != nil {
		return nil, err
	}
	// About half a sample lands in each exec's main on this VM: 3× the
	// execs of the CPU table above.
	pr.pluginTop, pr.pluginErr = n.profilePlugin(dir, 3*min(execs, 100))
	if pr.straceTable, err = n.straceADD(dir); err != nil {
		pr.straceTable = err.Error()
	}
	return pr, nil
}
