// Package e2e runs sluice whole: the real sluice and sluice-agent binaries,
// the reference bridge/host-local plugins through libcni, real network
// namespaces and real connections. Every test builds its own "node" netns,
// in which the agent and the CNI chain run, so the machine's own network is
// never touched.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/productbuild"
	"github.com/sluicemesh/sluice/test/harness/agenttest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
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
	bin, err := agenttest.Build(context.Background(), productbuild.Options{},
		agenttest.Bridge, agenttest.HostLocal, agenttest.Loopback,
		productbuild.Target{Name: "demo", Pkg: "github.com/sluicemesh/sluice/hack/demo"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build:", err)
		os.Exit(1)
	}
	binDir = bin.Dir
	code := func() int {
		defer bin.Remove()
		defer sharedAPI.Stop()
		return m.Run()
	}()
	os.Exit(code)
}

// node is one simulated node (agenttest.Node, with the CNI dirs the agent
// installs into) and this test's agent.
type node struct {
	*agenttest.Node
	t     *testing.T
	agent *agent
	// The agent runs in the node netns unless it must reach a server on the
	// machine's loopback (the test kube-apiserver).
	agentInHostNetns bool
	// agentEnv is added to the agent's environment (OTEL_*).
	agentEnv []string
}

func newNode(t *testing.T) *node {
	t.Helper()
	return &node{Node: agenttest.NewNode(t), t: t}
}

// agent is a running sluice-agent process.
type agent = proctest.Proc

// startAgent runs sluice-agent inside the node netns and waits until it
// is ready.
func (n *node) startAgent(extra ...string) *agent {
	n.t.Helper()
	a := n.startAgentNotReady(extra...)
	a.Wait(n.t, 10*time.Second, func() bool {
		resp, err := n.Status()
		return err == nil && resp.Ready
	}, "agent never became ready")
	return a
}

// startAgentNotReady runs sluice-agent and waits only until it answers.
func (n *node) startAgentNotReady(extra ...string) *agent {
	t := n.t
	t.Helper()
	args := n.agentArgs(extra...)
	argv := append([]string{filepath.Join(binDir, "sluice-agent")}, args...)
	cmd := n.Command(context.Background(), argv...)
	if n.agentInHostNetns {
		cmd = n.HostNetCommand(context.Background(), argv...)
	}
	if len(n.agentEnv) > 0 {
		cmd.Env = append(os.Environ(), n.agentEnv...)
	}
	a := proctest.Start(t, cmd)
	n.agent = a
	a.Wait(t, 10*time.Second, func() bool {
		_, err := n.Status()
		return err == nil
	}, "agent never answered")
	return a
}

// agentArgs are the agent's flags on this node, then extra. The CNI dirs
// always point into the test's temp dir, so even a test that turns the
// installer on never touches the machine's own.
func (n *node) agentArgs(extra ...string) []string {
	return append([]string{
		"--socket", n.Socket,
		"--state-dir", n.StateDir,
		"--netns-roots", n.Root,
		"--health-addr", "127.0.0.1:9890",
		"--cni-bin-dir", n.CNIBin,
		"--cni-conf-dir", n.ConfDir,
		"--plugin-binary", filepath.Join(binDir, "sluice"),
		"--install=false",
	}, extra...)
}

// ownedConflist is where the installer keeps the chain, sluice last, for
// the primary config named primary: "<stem>-sluice.conflist", sorting
// just before it.
func (n *node) ownedConflist(primary string) string {
	return filepath.Join(n.ConfDir, strings.TrimSuffix(primary, filepath.Ext(primary))+"-sluice.conflist")
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
}`, cniVersion, filepath.Join(n.t.TempDir(), "ipam"), n.Socket, sluiceExtra))
}

// cni runs libcni inside the node netns, as a container runtime on the
// node would: the bridge and its routes land in the node netns.
type cni = agenttest.Chain

func (n *node) cni(conflist []byte) *cni {
	n.t.Helper()
	return agenttest.NewChain(n.t, n.NS, conflist, binDir)
}

var rt = agenttest.PodRuntime

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

// child is the test binary re-executed as another user, to call the agent
// the way an unprivileged process on the node would. It prints the gRPC
// status code of a Status call.
func child(args []string) int {
	if len(args) == 1 && args[0] == "dial-lines" {
		return dialLines()
	}
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
