package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// profile is where the CPU of an ADD goes: perf's call-graph profile of the
// agent during a storm (the share of samples under each function, children
// included), the plugin's CPU per exec (rusage) next to loopback's and a Go
// hello-world's, and strace -c of one plugin ADD.
type profile struct {
	agentTop    []perfLine // sluice's own functions and the runtime's big ones
	agentCPU    time.Duration
	adds        int
	perfErr     error
	pluginCPU   map[string]time.Duration // per exec, p50 of user+sys
	straceTable string
}

type perfLine struct {
	children, self float64
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
	{"netlink batch (redirect.Apply)", "github.com/sluicemesh/sluice/daemon/redirect.Apply"},
	{"  of which marshalling (google/nftables)", "github.com/sluicemesh/sluice/daemon/redirect/nft.marshal"},
	{"DEL (workloads.Release)", "github.com/sluicemesh/sluice/daemon/workloads.(*Store).Release"},
	{"garbage collector", "runtime.gcBgMarkWorker"},
}

// perfAgent records the agent's call graph while fn runs.
func perfAgent(pid int, dir string, fn func() error) ([]perfLine, error) {
	data := filepath.Join(dir, "agent.perf")
	rec := exec.Command("perf", "record", "-q", "-F", "999", "-g", "-o", data, "-p", strconv.Itoa(pid))
	var stderr bytes.Buffer
	rec.Stderr = &stderr
	if err := rec.Start(); err != nil {
		return nil, fmt.Errorf("perf record: %w", err)
	}
	time.Sleep(200 * time.Millisecond) // perf attaches asynchronously
	ferr := fn()
	_ = rec.Process.Signal(syscall.SIGINT)
	werr := rec.Wait() // perf may report the SIGINT it was stopped with
	if ferr != nil {
		return nil, ferr
	}
	if st, err := os.Stat(data); err != nil || st.Size() == 0 {
		return nil, fmt.Errorf("perf record: %v: %s", werr, stderr.String())
	}
	out, err := exec.Command("perf", "report", "-i", data, "--stdio", "--children", "--sort", "symbol",
		"-g", "none", "--percent-limit", "0.3").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("perf report: %w: %s", err, tail(string(out), 5))
	}
	var lines []perfLine
	for _, l := range strings.Split(string(out), "\n") {
		// "    12.34%     0.56%  [.] symbol"
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasSuffix(f[0], "%") || !strings.HasSuffix(f[1], "%") {
			continue
		}
		c, err1 := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		s, err2 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		// f[2] is [.] or [k]; perf may add IPC columns after the symbol.
		lines = append(lines, perfLine{children: c, self: s, symbol: f[3]})
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("perf report: no samples parsed from:\n%s", tail(string(out), 12))
	}
	return lines, nil
}

// hopShare is the children share of the first symbol with prefix.
func hopShare(lines []perfLine, prefix string) (float64, bool) {
	best, ok := 0.0, false
	for _, l := range lines {
		if strings.HasPrefix(l.symbol, prefix) && l.children > best {
			best, ok = l.children, true
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
	sluiceConf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"bench","type":"sluice","socket":%q,"timeout":"2s","prevResult":%s}`, n.socket, prevResult)
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
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"bench","type":"sluice","socket":%q,"timeout":"2s","prevResult":%s}`, n.socket, prevResult)
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
	pr := &profile{adds: count}
	pid := n.agent.Process.Pid
	var sr *stormResult
	lines, err := perfAgent(pid, dir, func() error {
		var err error
		sr, err = n.storm("perf", n.sluice, count, pid)
		return err
	})
	if err != nil {
		// perf may be missing or not allowed: say so in the report.
		pr.perfErr = err
	} else {
		pr.agentTop, pr.agentCPU = lines, sr.addCPU.process
	}
	if pr.pluginCPU, err = n.pluginCPU(min(execs, 100)); err != nil {
		return nil, err
	}
	if pr.straceTable, err = n.straceADD(dir); err != nil {
		pr.straceTable = err.Error()
	}
	return pr, nil
}
