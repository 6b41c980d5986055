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
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/internal/nstest"
	"github.com/sluicemesh/sluice/internal/productbuild"
	"github.com/sluicemesh/sluice/internal/syncbuf"
)

// binDir holds the freshly built binaries, readable by any uid (the
// attacker runs as nobody).
var binDir string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("hostile: not root; every test will skip")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "sluice-hostile-bin-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := func() int {
		defer os.RemoveAll(dir)
		if err := build(dir); err != nil {
			fmt.Fprintln(os.Stderr, "hostile:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// build builds the plugin, the agent and the attacker in one go command
// (in parallel, one package graph), the product's way
// (internal/productbuild). HOSTILE_AGENT_SRC=<tree> builds the agent from
// an older tree instead, to show which rows that tree fails.
func build(dir string) error {
	ctx := context.Background()
	targets := append(productbuild.Product(),
		productbuild.Target{Name: "attacker", Pkg: "./test/hostile/attacker"},
		productbuild.Target{Name: "flood", Pkg: "./test/hostile/flood"})
	old := os.Getenv("HOSTILE_AGENT_SRC")
	if old != "" {
		targets = slices.DeleteFunc(targets, func(t productbuild.Target) bool { return t.Pkg == productbuild.AgentPackage })
	}
	if err := productbuild.Build(ctx, productbuild.Options{Dir: "../.."}, dir, targets...); err != nil {
		return err
	}
	if old == "" {
		return nil
	}
	agent := productbuild.Target{Name: productbuild.AgentName, Pkg: "./daemon"}
	return productbuild.Build(ctx, productbuild.Options{Dir: old}, dir, agent)
}

// node is one agent's world: a netns playing the host (the agent runs and
// serves /healthz there), a netns root of pod mounts, and its files.
type node struct {
	t        *testing.T
	dir      string
	ns       *nstest.NS
	root     string
	socket   string
	stateDir string
	agent    *agent
	// smallState runs the agent on a 64 KiB tmpfs state dir of its own.
	smallState bool
}

func newNode(t *testing.T) *node {
	t.Helper()
	nstest.RequireRoot(t)
	dir := t.TempDir()
	// The socket's base is reachable by any uid (a test's temp dir is not),
	// so loosening the socket's own dir and mode is all it takes to expose it.
	sockBase, err := os.MkdirTemp("", "sluice-hostile-sock-")
	if err == nil {
		err = os.Chmod(sockBase, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockBase) })
	n := &node{t: t, dir: dir, ns: nstest.New(t, "node"), root: filepath.Join(dir, "netns"),
		socket: filepath.Join(sockBase, "run", "agent.sock"), stateDir: filepath.Join(dir, "state")}
	if err := os.MkdirAll(n.root, 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

type agent struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

// start runs sluice-agent in the node netns; ready waits for /readyz.
func (n *node) start(ready bool, extra ...string) *agent {
	t := n.t
	t.Helper()
	args := append([]string{"--socket", n.socket, "--state-dir", n.stateDir, "--netns-roots", n.root,
		"--health-addr", "127.0.0.1:9890", "--install=false", "--max-inflight", "4",
		"--exclude-namespaces", "kube-system,excluded"}, extra...)
	a := &agent{logs: &syncBuffer{}, done: make(chan struct{})}
	a.cmd = n.ns.Command(filepath.Join(binDir, "sluice-agent"), args...)
	if n.smallState {
		// The state dir is a 64 KiB tmpfs in a mount namespace of the
		// agent's own: the test fills or remounts it through /proc/<pid>.
		// The netns root is made a shared mount first, so pods mounted
		// under it later reach the agent's (slave) copy.
		if err := unix.Mount(n.root, n.root, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(n.root, unix.MNT_DETACH) })
		if err := unix.Mount("", n.root, "", unix.MS_SHARED, ""); err != nil {
			t.Fatal(err)
		}
		a.cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "slave", "--", "sh", "-c",
			`mkdir -p "$0" && mount -t tmpfs -o size=64k,mode=0700 tmpfs "$0" && exec "$@"`, n.stateDir}, a.cmd.Args...)...)
	}
	a.cmd.Stdout, a.cmd.Stderr = a.logs, a.logs
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	go func() { a.cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		a.cmd.Process.Signal(syscall.SIGKILL)
		<-a.done
		if t.Failed() {
			t.Logf("agent log:\n%s", a.logs)
		}
	})
	if ready {
		nstest.Eventually(t, 10*time.Second, func() bool {
			select {
			case <-a.done:
				t.Fatalf("agent exited: %v\n%s", a.cmd.ProcessState, a.logs)
			default:
			}
			code, _ := n.get("/readyz")
			return code == 200
		}, "agent never ready:\n%s", a.logs)
		n.agent = a
	}
	return a
}

// get fetches a path of the agent's health address, inside the node netns.
func (n *node) get(path string) (int, string) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			return n.ns.Dial(network, addr, 2*time.Second)
		},
	}}
	resp, err := client.Get("http://127.0.0.1:9890" + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// plugin runs the real sluice binary for one verb, as a runtime would.
type call struct {
	verb, id, netns, ifName, podNS string
	conf                           map[string]any // merged into the entry
}

// run returns the CNI error (nil on success) and how long the call took.
func (n *node) run(c call) (*types.Error, time.Duration) {
	n.t.Helper()
	conf := map[string]any{"cniVersion": "1.0.0", "name": "net-a", "type": "sluice", "socket": n.socket, "timeout": "2s",
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
	pod := nstest.NewIn(t, n.root, fmt.Sprintf("fresh-%d", time.Now().UnixNano()))
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

type syncBuffer struct{ syncbuf.Buffer }

func (s *syncBuffer) count(sub string) int { return strings.Count(s.String(), sub) }
