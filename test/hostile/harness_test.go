// Package hostile drives the real sluice and sluice-agent binaries with what
// a hostile or buggy caller does, each case a row: the attack, the refusal
// expected, and then the proof that matters: the agent still serves a valid
// ADD within its deadline and no other pod's ruleset changed.
package hostile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/internal/productbuild"
	"github.com/sluicemesh/sluice/test/harness/agenttest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// binDir holds the freshly built binaries, readable by any uid (the
// attacker runs as nobody).
var binDir string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("hostile: not root; every test will skip")
		os.Exit(m.Run())
	}
	bin, err := build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(1)
	}
	binDir = bin.Dir
	code := m.Run()
	bin.Remove()
	os.Exit(code)
}

// build builds the plugin, the agent and the attacker in one go command
// (in parallel, one package graph), the product's way. HOSTILE_AGENT_SRC=<tree>
// builds the agent from an older tree instead, to show which rows that
// tree fails.
func build() (agenttest.Bin, error) {
	ctx := context.Background()
	attackers := []productbuild.Target{{Name: "attacker", Pkg: "./test/hostile/attacker"}, {Name: "flood", Pkg: "./test/hostile/flood"}}
	old := os.Getenv("HOSTILE_AGENT_SRC")
	if old == "" {
		return agenttest.Build(ctx, productbuild.Options{Dir: "../.."}, attackers...)
	}
	plugin := productbuild.Target{Name: productbuild.PluginName, Pkg: productbuild.PluginPackage}
	bin, err := agenttest.BuildOnly(ctx, productbuild.Options{Dir: "../.."}, append(attackers, plugin)...)
	if err != nil {
		return bin, err
	}
	agent := productbuild.Target{Name: productbuild.AgentName, Pkg: "./daemon"}
	if err := productbuild.Build(ctx, productbuild.Options{Dir: old}, bin.Dir, agent); err != nil {
		bin.Remove()
		return bin, err
	}
	return bin, nil
}

// node is one agent's world (agenttest.Node: the agent runs and serves
// /healthz in its netns, its socket where any uid can reach it) and this
// test's agent.
type node struct {
	agenttest.Node // by value: a test copies a node to start a second agent beside it
	t              *testing.T
	agent          *agent
	// smallState runs the agent on a 64 KiB tmpfs state dir of its own.
	smallState bool
}

func newNode(t *testing.T) *node {
	t.Helper()
	return &node{Node: *agenttest.NewNodeWith(t, agenttest.NodeOptions{ReachableSocket: true}), t: t}
}

type agent = proctest.Proc

// start runs sluice-agent in the node netns; ready waits for /readyz.
func (n *node) start(ready bool, extra ...string) *agent {
	t := n.t
	t.Helper()
	args := append([]string{"--socket", n.Socket, "--state-dir", n.StateDir, "--netns-roots", n.Root,
		"--health-addr", "127.0.0.1:9890", "--install=false", "--max-inflight", "4",
		"--exclude-namespaces", "kube-system,excluded"}, extra...)
	cmd := n.NS.Command(filepath.Join(binDir, "sluice-agent"), args...)
	if n.smallState {
		cmd = n.inSmallState(cmd)
	}
	a := proctest.Start(t, cmd)
	if ready {
		a.Wait(t, 10*time.Second, func() bool {
			code, _ := n.get("/readyz")
			return code == 200
		}, "agent never ready")
		n.agent = a
	}
	return a
}

// inSmallState runs cmd with its state dir a 64 KiB tmpfs in a mount
// namespace of its own: the test fills or remounts it through
// /proc/<pid>. The netns root is made a shared mount first, so pods
// mounted under it later reach the agent's (slave) copy.
func (n *node) inSmallState(cmd *exec.Cmd) *exec.Cmd {
	t := n.t
	if err := unix.Mount(n.Root, n.Root, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(n.Root, unix.MNT_DETACH) })
	if err := unix.Mount("", n.Root, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	return exec.Command("unshare", append([]string{"--mount", "--propagation", "slave", "--", "sh", "-c",
		`mkdir -p "$0" && mount -t tmpfs -o size=64k,mode=0700 tmpfs "$0" && exec "$@"`, n.StateDir}, cmd.Args...)...)
}

// get fetches a path of the agent's health address, inside the node netns:
// the status code and the body, or 0 and the error.
func (n *node) get(path string) (int, string) {
	code, body, err := n.HTTPGet("http://127.0.0.1:9890" + path)
	if err != nil {
		return 0, err.Error()
	}
	return code, body
}

// plugin runs the real sluice binary for one verb, as a runtime would.
type call struct {
	verb, id, netns, ifName, podNS string
	conf                           map[string]any // merged into the entry
}

// run returns the CNI error (nil on success) and how long the call took.
func (n *node) run(c call) (*types.Error, time.Duration) {
	n.t.Helper()
	conf := map[string]any{"cniVersion": "1.0.0", "name": "net-a", "type": "sluice", "socket": n.Socket, "timeout": "2s",
		"prevResult": map[string]any{"cniVersion": "1.0.0", "ips": []map[string]any{{"address": "10.1.0.2/24"}}}}
	for k, v := range c.conf {
		conf[k] = v
	}
	stdin, _ := json.Marshal(conf)
	ifName := c.ifName
	if ifName == "" {
		ifName = "eth0"
	}
	podNS := c.podNS
	if podNS == "" {
		podNS = "default"
	}
	cmd := exec.Command(filepath.Join(binDir, "sluice"))
	cmd.Env = []string{"CNI_COMMAND=" + c.verb, "CNI_CONTAINERID=" + c.id, "CNI_NETNS=" + c.netns, "CNI_IFNAME=" + ifName,
		"CNI_PATH=" + binDir, "CNI_ARGS=K8S_POD_NAMESPACE=" + podNS + ";K8S_POD_NAME=p-" + c.id[:min(len(c.id), 20)] + ";K8S_POD_UID=uid-" + c.id[:min(len(c.id), 20)]}
	cmd.Stdin = bytes.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout = &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err == nil {
		return nil, took
	}
	e := &types.Error{}
	if jerr := json.Unmarshal(out.Bytes(), e); jerr != nil {
		n.t.Fatalf("%s %s: %v, output %q", c.verb, c.id, err, out.String())
	}
	return e, took
}

// ruleset is the sluice table in a netns as the kernel holds it ("" when none).
func ruleset(t *testing.T, ns *nstest.NS) string {
	t.Helper()
	out, err := ns.Command("nft", "list", "table", "inet", "sluice").CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

// stillServes is every row's proof: a fresh pod's ADD succeeds within the
// plugin's deadline, and the victim's ruleset is what it was.
func (n *node) stillServes(t *testing.T, victim *nstest.NS, before string) {
	t.Helper()
	pod := nstest.NewIn(t, n.Root, fmt.Sprintf("fresh-%d", time.Now().UnixNano()))
	e, took := n.run(call{verb: "ADD", id: pod.Name, netns: pod.Path})
	if e != nil || took > 2*time.Second {
		t.Fatalf("valid ADD after the attack: %v in %v", e, took)
	}
	if ruleset(t, pod) == "" {
		t.Fatal("valid ADD after the attack programmed no ruleset")
	}
	if after := ruleset(t, victim); after != before {
		t.Fatalf("the victim's ruleset changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
