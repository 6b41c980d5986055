// Package e2e runs sluice whole: the real sluice and sluice-agent binaries,
// the reference bridge/host-local plugins through libcni, real network
// namespaces and real connections. Every test builds its own "node" netns,
// in which the agent and the CNI chain run, so the machine's own network is
// never touched.
package e2e

import (
	"bufio"
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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/nstest"
	"github.com/sluicemesh/sluice/internal/productbuild"
	"github.com/sluicemesh/sluice/internal/syncbuf"
)

// binDir holds freshly built sluice, sluice-agent and the reference plugins.
var binDir string

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		os.Exit(child(os.Args[2:]))
	}
	if os.Geteuid() != 0 {
		fmt.Println("e2e: not root; every test will skip")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "sluice-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := func() int {
		defer os.RemoveAll(dir)
		if err := buildBinaries(dir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: build:", err)
			return 1
		}
		defer sharedAPI.Stop()
		return m.Run()
	}()
	os.Exit(code)
}

// buildBinaries builds everything the tests exec, the product's way
// (internal/productbuild). The go build cache makes a warm run cost only
// the links.
func buildBinaries(dir string) error {
	return productbuild.Build(context.Background(), productbuild.Options{}, dir, append(productbuild.Product(),
		productbuild.Target{Name: "bridge", Pkg: "github.com/containernetworking/plugins/plugins/main/bridge"},
		productbuild.Target{Name: "host-local", Pkg: "github.com/containernetworking/plugins/plugins/ipam/host-local"},
		productbuild.Target{Name: "loopback", Pkg: "github.com/containernetworking/plugins/plugins/main/loopback"},
		productbuild.Target{Name: "demo", Pkg: "github.com/sluicemesh/sluice/hack/demo"})...)
}

// node is one simulated node: a netns playing the host, a dir of pod netns
// mounts (the agent's --netns-roots), and the agent's files.
type node struct {
	t        *testing.T
	ns       *nstest.NS
	nsRoot   string
	socket   string
	stateDir string
	confDir  string
	cniBin   string
	agent    *agent
	// The agent runs in the node netns unless it must reach a server on the
	// machine's loopback (the test kube-apiserver).
	agentInHostNetns bool
}

func newNode(t *testing.T) *node {
	t.Helper()
	nstest.RequireRoot(t)
	dir := t.TempDir()
	n := &node{
		t:        t,
		ns:       nstest.New(t, "node"),
		nsRoot:   filepath.Join(dir, "netns"),
		socket:   filepath.Join(dir, "run", "agent.sock"),
		stateDir: filepath.Join(dir, "state"),
		confDir:  filepath.Join(dir, "net.d"),
		cniBin:   filepath.Join(dir, "cni-bin"),
	}
	for _, d := range []string{n.nsRoot, n.confDir, n.cniBin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// pod makes a pod netns under the agent's netns root.
func (n *node) pod(name string) *nstest.NS {
	return nstest.NewIn(n.t, n.nsRoot, name)
}

// agent is a running sluice-agent process.
type agent struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

// startAgent runs sluice-agent inside the node netns and waits until it
// is ready.
func (n *node) startAgent(extra ...string) *agent {
	n.t.Helper()
	a := n.startAgentNotReady(extra...)
	nstest.Eventually(n.t, 10*time.Second, func() bool {
		select {
		case <-a.done:
			n.t.Fatalf("agent exited: %v\n%s", a.cmd.ProcessState, a.logs.String())
		default:
		}
		resp, err := n.status()
		return err == nil && resp.Ready
	}, "agent never became ready:\n%s", a.logs)
	return a
}

// startAgentNotReady runs sluice-agent and waits only until it answers.
func (n *node) startAgentNotReady(extra ...string) *agent {
	t := n.t
	t.Helper()
	args := n.agentArgs(extra...)
	a := &agent{logs: &syncBuffer{}, done: make(chan struct{})}
	if n.agentInHostNetns {
		a.cmd = exec.Command(filepath.Join(binDir, "sluice-agent"), args...)
	} else {
		a.cmd = n.ns.Command(filepath.Join(binDir, "sluice-agent"), args...)
	}
	a.cmd.Stdout, a.cmd.Stderr = a.logs, a.logs
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	go func() { a.cmd.Wait(); close(a.done) }()
	n.agent = a
	t.Cleanup(func() {
		a.cmd.Process.Signal(syscall.SIGKILL)
		<-a.done
		if t.Failed() {
			t.Logf("agent log:\n%s", a.logs.String())
		}
	})
	nstest.Eventually(t, 10*time.Second, func() bool {
		select {
		case <-a.done:
			t.Fatalf("agent exited: %v\n%s", a.cmd.ProcessState, a.logs.String())
		default:
		}
		_, err := n.status()
		return err == nil
	}, "agent never answered:\n%s", a.logs)
	return a
}

// agentArgs are the agent's flags on this node, then extra. The CNI dirs
// always point into the test's temp dir, so even a test that turns the
// installer on never touches the machine's own.
func (n *node) agentArgs(extra ...string) []string {
	return append([]string{
		"--socket", n.socket,
		"--state-dir", n.stateDir,
		"--netns-roots", n.nsRoot,
		"--health-addr", "127.0.0.1:9890",
		"--cni-bin-dir", n.cniBin,
		"--cni-conf-dir", n.confDir,
		"--plugin-binary", filepath.Join(binDir, "sluice"),
		"--install=false",
	}, extra...)
}

// stop sends SIGTERM and waits for a clean exit.
func (a *agent) stop(t *testing.T) {
	t.Helper()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("agent did not exit on SIGTERM:\n%s", a.logs)
	}
	if !a.cmd.ProcessState.Success() {
		t.Fatalf("agent exit %v:\n%s", a.cmd.ProcessState, a.logs)
	}
}

// client is a direct gRPC connection to the agent, as grpcurl would make.
func (n *node) client() *grpc.ClientConn {
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { conn.Close() })
	return conn
}

func (n *node) status() (*sluicev1.StatusResponse, error) {
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return sluicev1.NewCNIClient(conn).Status(ctx, &sluicev1.StatusRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_1})
}

// httpGet fetches a URL from inside the node netns (the agent's health
// endpoint listens there).
func (n *node) httpGet(url string) (int, string, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			return n.ns.Dial(network, addr, 2*time.Second)
		},
	}}
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// conflist is the demo's chain: bridge + host-local, then sluice.
func (n *node) conflist(cniVersion string, sluiceExtra string) []byte {
	return []byte(fmt.Sprintf(`{
  "cniVersion": %q,
  "name": "e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "dataDir": %q,
              "ranges": [[{"subnet": "10.244.0.0/24"}], [{"subnet": "fd00:244::/64"}]],
              "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}},
    {"type": "sluice", "socket": %q, "timeout": "2s"%s}
  ]
}`, cniVersion, filepath.Join(n.t.TempDir(), "ipam"), n.socket, sluiceExtra))
}

// cni runs libcni inside the node netns, as a container runtime on the
// node would: the bridge and its routes land in the node netns.
type cni struct {
	node *node
	conf *libcni.NetworkConfigList
	lib  *libcni.CNIConfig
}

func (n *node) cni(conflist []byte) *cni {
	n.t.Helper()
	conf, err := libcni.ConfListFromBytes(conflist)
	if err != nil {
		n.t.Fatalf("conflist: %v", err)
	}
	return &cni{node: n, conf: conf, lib: libcni.NewCNIConfigWithCacheDir([]string{binDir}, n.t.TempDir(), nil)}
}

func rt(containerID string, pod *nstest.NS) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: containerID,
		NetNS:       pod.Path,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"}, // as containerd and CRI-O send
			{"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", pod.Name},
			{"K8S_POD_UID", "uid-" + pod.Name},
		},
	}
}

func (c *cni) add(rc *libcni.RuntimeConf) (types.Result, error) {
	var res types.Result
	err := c.node.ns.Do(func() error {
		var err error
		res, err = c.lib.AddNetworkList(context.Background(), c.conf, rc)
		return err
	})
	return res, err
}

func (c *cni) del(rc *libcni.RuntimeConf) error {
	return c.node.ns.Do(func() error { return c.lib.DelNetworkList(context.Background(), c.conf, rc) })
}

func (c *cni) check(rc *libcni.RuntimeConf) error {
	return c.node.ns.Do(func() error { return c.lib.CheckNetworkList(context.Background(), c.conf, rc) })
}

// execPlugin runs the sluice binary by hand with the given stdin and env,
// returning stdout and the exit error.
func execPlugin(t *testing.T, ns *nstest.NS, env []string, stdin []byte) ([]byte, error) {
	t.Helper()
	cmd := ns.Command(filepath.Join(binDir, "sluice"))
	cmd.Env = append([]string{"CNI_PATH=" + binDir, "PATH=/usr/bin:/bin"}, env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	return out.Bytes(), err
}

// cniError decodes the error JSON a plugin prints on failure.
func cniError(t *testing.T, out []byte) *types.Error {
	t.Helper()
	e := &types.Error{}
	if err := json.Unmarshal(out, e); err != nil || e.Code == 0 {
		t.Fatalf("not a CNI error: %q (%v)", out, err)
	}
	return e
}

// syncBuffer collects a child's output from several goroutines.
type syncBuffer struct{ syncbuf.Buffer }

// lines returns the log lines that contain every one of words.
func (s *syncBuffer) lines(words ...string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s.String()))
	for sc.Scan() {
		l := sc.Text()
		match := true
		for _, w := range words {
			match = match && strings.Contains(l, w)
		}
		if match {
			out = append(out, l)
		}
	}
	return out
}

func (n *node) listWorkloads(t *testing.T) []*sluicev1.Workload {
	t.Helper()
	resp, err := sluicev1.NewDebugClient(n.client()).ListWorkloads(t.Context(), &sluicev1.ListWorkloadsRequest{})
	if err != nil {
		t.Fatalf("ListWorkloads: %v", err)
	}
	return resp.Workloads
}

// child is the test binary re-executed as another user, to call the agent
// the way an unprivileged process on the node would. It prints the gRPC
// status code of a Status call.
func child(args []string) int {
	if len(args) != 2 || args[0] != "status" {
		fmt.Fprintln(os.Stderr, "usage: child status SOCKET")
		return 2
	}
	conn, err := grpc.NewClient("unix://"+args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = sluicev1.NewCNIClient(conn).Status(ctx, &sluicev1.StatusRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_1})
	fmt.Println(status.Code(err))
	return 0
}

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}
