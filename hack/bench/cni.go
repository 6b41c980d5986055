package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// node is a simulated node: a netns in which sluice-agent runs (its health
// port binds there, not on the machine), a dir of pod netns mounts, and the
// runtime's side, libcni, exec'ing the plugins from this process.
type node struct {
	nd        *nsDir
	nodeNS    string
	dir       string
	socket    string
	bins      bins
	lib       *libcni.CNIConfig
	sluice    *libcni.NetworkConfig
	loopback  *libcni.NetworkConfig
	chain     *libcni.NetworkConfigList
	agent     *exec.Cmd
	agentDone chan struct{}
	agentLog  *os.File
	stateDir  string
	resync    time.Duration // the agent's --resync-interval
	extra     []string      // more agent flags (Kubernetes mode)
	agentBin  string        // the agent binary in bins.dir; "" is sluice-agent
	env       []string      // more agent environment
}

// prevResult is what a primary CNI would have handed sluice.
const prevResult = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/pod"}],` +
	`"ips":[{"address":"10.22.0.5/16","gateway":"10.22.0.1","interface":0}]}`

func newNode(nd *nsDir, dir string, b bins) (*node, error) {
	nodeNS, err := nd.create("node-" + filepath.Base(dir))
	if err != nil {
		return nil, err
	}
	if err := kubeProxyChains(nodeNS); err != nil {
		return nil, err
	}
	n := &node{nd: nd, nodeNS: nodeNS, dir: dir, socket: filepath.Join(dir, "run", "agent.sock"), bins: b,
		stateDir: filepath.Join(dir, "state"), resync: time.Minute}
	for _, d := range []string{filepath.Join(dir, "cache"), filepath.Join(dir, "netd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	n.lib = libcni.NewCNIConfigWithCacheDir([]string{b.dir}, filepath.Join(dir, "cache"), nil)
	n.sluice, err = libcni.NetworkPluginConfFromBytes([]byte(fmt.Sprintf(
		`{"cniVersion":"1.0.0","name":"bench","type":"sluice","socket":%q,"prevResult":%s}`, n.socket, prevResult)))
	if err != nil {
		return nil, err
	}
	n.loopback, err = libcni.NetworkPluginConfFromBytes([]byte(`{"cniVersion":"1.0.0","name":"bench-lo","type":"loopback"}`))
	if err != nil {
		return nil, err
	}
	n.chain, err = libcni.ConfListFromBytes([]byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"bench-chain","plugins":[
		{"type":"loopback"},{"type":"sluice","socket":%q}]}`, n.socket)))
	return n, err
}

// kubeProxyChains gives the node netns the base chains kube-proxy's
// nftables mode keeps on every Kubernetes node (filter and nat, IPv4 and
// IPv6), empty. A node always has netfilter hooks in use; on a machine with
// none anywhere, the first capture after the last one went costs ~1 ms
// more (the kernel patches its hook static keys, with an IPI to every CPU)
// and every ADD of the Kubernetes-mode rows, each in a netns removed after
// it, would pay that.
func kubeProxyChains(nodeNS string) error {
	var rules strings.Builder
	for _, family := range []string{"ip", "ip6"} {
		fmt.Fprintf(&rules, "table %s kube-proxy {\n", family)
		for _, c := range []struct{ name, typ, hook, prio string }{
			{"filter-input", "filter", "input", "-110"}, {"filter-forward", "filter", "forward", "-110"},
			{"filter-output", "filter", "output", "-110"}, {"nat-prerouting", "nat", "prerouting", "-100"},
			{"nat-output", "nat", "output", "-100"}, {"nat-postrouting", "nat", "postrouting", "100"},
		} {
			fmt.Fprintf(&rules, "  chain %s { type %s hook %s priority %s; }\n", c.name, c.typ, c.hook, c.prio)
		}
		rules.WriteString("}\n")
	}
	cmd := exec.Command("nsenter", "--net="+nodeNS, "--", "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kube-proxy's chains in the node netns: %v: %s", err, out)
	}
	return nil
}

// startAgent runs sluice-agent in the node netns and returns once it
// answers Status ready: the time that took (the agent reconciles its
// journal before it serves).
func (n *node) startAgent() (time.Duration, error) {
	log, err := os.OpenFile(filepath.Join(n.dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	n.agentLog = log
	bin := n.agentBin
	if bin == "" {
		bin = "sluice-agent"
	}
	args := []string{"--net=" + n.nodeNS, "--", filepath.Join(n.bins.dir, bin),
		"--socket", n.socket, "--state-dir", n.stateDir, "--netns-roots", n.nd.dir,
		"--health-addr", "127.0.0.1:9890", "--install=false", "--cni-bin-dir", n.bins.dir,
		"--cni-conf-dir", filepath.Join(n.dir, "netd"), "--plugin-binary", filepath.Join(n.bins.dir, "sluice"),
		"--log-level", "warn", "--max-inflight", "256", "--resync-interval", n.resync.String(),
		// The scale run measures the full pass over its interval; the cheap
		// pass has its own row (verify.go).
		"--verify-interval", n.resync.String()}
	cmd := exec.Command("nsenter", append(args, n.extra...)...)
	cmd.Env = append(os.Environ(), n.env...)
	cmd.Stdout, cmd.Stderr = log, log
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	n.agent, n.agentDone = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(n.agentDone) }()
	deadline := start.Add(60 * time.Second)
	for {
		select {
		case <-n.agentDone:
			return 0, fmt.Errorf("agent exited: %v; its log ends:\n%s", cmd.ProcessState, tail(readFile(log.Name()), 15))
		default:
		}
		if n.ready() {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("agent not ready after 60s; its log ends:\n%s", tail(readFile(log.Name()), 15))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (n *node) ready() bool {
	if _, err := os.Stat(n.socket); err != nil {
		return false
	}
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := sluicev1.NewCNIClient(conn).Status(ctx, &sluicev1.StatusRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_1})
	return err == nil && resp.Ready
}

// stopAgent ends the agent with SIGTERM (SIGKILL after 15s).
func (n *node) stopAgent() {
	if n.agent == nil {
		return
	}
	n.agent.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.agentDone:
	case <-time.After(15 * time.Second):
		n.agent.Process.Kill()
		<-n.agentDone
	}
	n.agent = nil
	n.agentLog.Close()
}

// rssKiB is the agent's resident set now and at its peak.
func (n *node) rssKiB() (now, peak int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.agent.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			v, _ := strconv.Atoi(f[1])
			if f[0] == "VmRSS:" {
				now = v
			} else {
				peak = v
			}
		}
	}
	return now, peak, nil
}

func rc(id, nsPath string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: id, NetNS: nsPath, IfName: "eth0", Args: [][2]string{
		{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "bench"}, {"K8S_POD_NAME", id}, {"K8S_POD_UID", "uid-" + id},
	}}
}

// add runs the sluice plugin through libcni with a prevResult, as the
// runtime runs the last plugin of a chain, and returns how long it took.
func (n *node) add(id, nsPath string) (time.Duration, error) {
	start := time.Now()
	_, err := n.lib.AddNetwork(context.Background(), n.sluice, rc(id, nsPath))
	return time.Since(start), err
}

func (n *node) del(id, nsPath string) (time.Duration, error) {
	start := time.Now()
	err := n.lib.DelNetwork(context.Background(), n.sluice, rc(id, nsPath))
	return time.Since(start), err
}

func (n *node) addLoopback(id, nsPath string) (time.Duration, error) {
	start := time.Now()
	_, err := n.lib.AddNetwork(context.Background(), n.loopback, rc(id, nsPath))
	return time.Since(start), err
}

func (n *node) addChain(id, nsPath string) (time.Duration, error) {
	start := time.Now()
	_, err := n.lib.AddNetworkList(context.Background(), n.chain, rc(id, nsPath))
	return time.Since(start), err
}

// pods makes count pod namespaces named prefix-i.
func (n *node) pods(prefix string, count int) ([]string, error) {
	out := make([]string, count)
	for i := range out {
		p, err := n.nd.create(fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// journalBound times count ADDs (then DELs) with the agent's journal on
// tmpfs: the same path minus the fsyncs of a disk, to show what they cost.
func (n *node) journalBound(count int) (series, error) {
	s := series{name: "sluice ADD, journal on disk"}
	paths, err := n.pods("disk", count)
	if err != nil {
		return s, err
	}
	for i, p := range paths {
		d, err := n.add(fmt.Sprintf("disk-%d", i), p)
		if err != nil {
			return s, err
		}
		s.add(d)
	}
	for i, p := range paths {
		if _, err := n.del(fmt.Sprintf("disk-%d", i), p); err != nil {
			return s, err
		}
		n.nd.remove(p)
	}
	return s, nil
}

// scaleResult is the ADD latency with few and with many pods enrolled, the
// agent's memory and its restart time with every pod journaled.
type scaleResult struct {
	pods               int
	addSmall, addLarge series // probe ADDs with small / pods enrolled
	// loSmall and loLarge are loopback's ADD in the same probe netns right
	// after each probe: what the node itself does with that many pods.
	loSmall, loLarge    series
	small               int
	rssKiB, hwmKiB      int
	restart             time.Duration
	rssAfterRestartKiB  int
	resyncCPU           time.Duration // the agent's CPU over one resync interval
	restartTop          []perfLine    // CPU profile from exec to ready
	resyncInterval      time.Duration
	sluiceAdd, loopback series // the first e2ePods ADDs of the ramp, and loopback in the same netns
	chain               series // loopback + sluice as one conflist
	delAll              series
}

func (n *node) scale(total, e2ePods, small, probes int) (*scaleResult, error) {
	paths, err := n.pods("pod", total)
	if err != nil {
		return nil, err
	}
	probe, err := n.pods("probe", probes)
	if err != nil {
		return nil, err
	}
	res := &scaleResult{pods: total, small: small,
		sluiceAdd: series{name: "sluice ADD (libcni → sluice → agent → netlink)"},
		loopback:  series{name: "loopback ADD (reference plugin)"},
		chain:     series{name: "loopback + sluice conflist ADD"},
		addSmall:  series{name: fmt.Sprintf("ADD with %d pods enrolled", small)},
		addLarge:  series{name: fmt.Sprintf("ADD with %d pods enrolled", total)},
		loSmall:   series{name: fmt.Sprintf("loopback ADD beside them, %d pods", small)},
		loLarge:   series{name: fmt.Sprintf("loopback ADD beside them, %d pods", total)},
		delAll:    series{name: "DEL"},
	}
	// probeRound ADDs and DELs each probe netns with sluice into s, then
	// with loopback into lo.
	probeRound := func(s, lo *series, round string) error {
		for i, p := range probe {
			id := fmt.Sprintf("probe-%s-%d", round, i)
			d, err := n.add(id, p)
			if err != nil {
				return fmt.Errorf("probe ADD: %w", err)
			}
			s.add(d)
			if _, err := n.del(id, p); err != nil {
				return fmt.Errorf("probe DEL: %w", err)
			}
			if d, err = n.addLoopback(id+"-lo", p); err != nil {
				return fmt.Errorf("loopback probe ADD: %w", err)
			}
			lo.add(d)
			if err := n.lib.DelNetwork(context.Background(), n.loopback, rc(id+"-lo", p)); err != nil {
				return fmt.Errorf("loopback probe DEL: %w", err)
			}
		}
		return nil
	}
	for i, p := range paths {
		if i == small {
			if err := probeRound(&res.addSmall, &res.loSmall, "small"); err != nil {
				return nil, err
			}
		}
		if i < e2ePods {
			// Interleaved, pod by pod, so noise falls on both alike.
			d, err := n.addLoopback(fmt.Sprintf("lo-%d", i), p)
			if err != nil {
				return nil, fmt.Errorf("loopback ADD: %w", err)
			}
			res.loopback.add(d)
		}
		d, err := n.add(fmt.Sprintf("pod-%d", i), p)
		if err != nil {
			return nil, fmt.Errorf("ADD pod %d: %w", i, err)
		}
		if i < e2ePods {
			res.sluiceAdd.add(d)
		}
	}
	if err := probeRound(&res.addLarge, &res.loLarge, "large"); err != nil {
		return nil, err
	}
	// The full chain, for context, in the probe namespaces.
	for i, p := range probe {
		id := fmt.Sprintf("chain-%d", i)
		d, err := n.addChain(id, p)
		if err != nil {
			return nil, fmt.Errorf("chain ADD: %w", err)
		}
		res.chain.add(d)
		if err := n.lib.DelNetworkList(context.Background(), n.chain, rc(id, p)); err != nil {
			return nil, fmt.Errorf("chain DEL: %w", err)
		}
	}
	if res.rssKiB, res.hwmKiB, err = n.rssKiB(); err != nil {
		return nil, err
	}
	// One whole resync interval with every pod enrolled and nothing else
	// to do: what the periodic verify of every netns costs.
	res.resyncInterval = n.resync
	before, err := readCPU(n.agent.Process.Pid)
	if err != nil {
		return nil, err
	}
	time.Sleep(n.resync)
	after, err := readCPU(n.agent.Process.Pid)
	if err != nil {
		return nil, err
	}
	res.resyncCPU = after.sub(before).process
	// The probes at many pods run again a resync interval later and pool
	// with the first ones, as those at few pods do at both ends: one round
	// is a few seconds, and whatever the machine does then (a collection
	// of the agent's 5,000-record heap, another tenant) falls on it alone.
	if err := probeRound(&res.addLarge, &res.loLarge, "large-after"); err != nil {
		return nil, err
	}
	n.stopAgent()
	// The restart runs the sluicebench build with a CPU profile, which
	// covers the start-up reconcile: the profile of the restart time.
	prof := filepath.Join(n.dir, "restart.pprof")
	n.agentBin, n.env = "sluice-agent-prof", []string{"SLUICE_BENCH_CPUPROFILE=" + prof}
	res.restart, err = n.startAgent()
	n.agentBin, n.env = "", nil
	if err != nil {
		return nil, err
	}
	if res.restartTop, err = n.stopProfile(prof); err != nil && !errors.Is(err, errNoSamples) {
		return nil, err
	}
	if res.rssAfterRestartKiB, _, err = n.rssKiB(); err != nil {
		return nil, err
	}
	for i, p := range paths {
		// The probes at few pods run again once the DELs are down to that
		// many, and pool with the first ones: the two ends of the section
		// are a minute apart, and the machine's drift over it then falls on
		// the probes at few pods as much as on those at many.
		if len(paths)-i == small {
			if err := probeRound(&res.addSmall, &res.loSmall, "small-after"); err != nil {
				return nil, err
			}
		}
		d, err := n.del(fmt.Sprintf("pod-%d", i), p)
		if err != nil {
			return nil, fmt.Errorf("DEL pod %d: %w", i, err)
		}
		res.delAll.add(d)
	}
	for _, p := range append(paths, probe...) {
		n.nd.remove(p)
	}
	return res, nil
}
