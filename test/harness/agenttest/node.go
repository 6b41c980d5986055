package agenttest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// Node is one simulated node: a netns playing the host, in which the agent
// and the CNI chain run, a dir of pod netns mounts (the agent's
// --netns-roots), the agent's socket and state dir, the node's CNI conf and
// bin dirs and a cgroup parent for its pods, all the test's own, so the
// machine's own network, files and cgroups are never touched. With
// PrivateRun the node has a mount namespace of its own too.
type Node struct {
	T        testing.TB
	Dir      string
	NS       *nstest.NS
	Root     string // pod netns mounts
	Socket   string
	StateDir string
	ConfDir  string // the node's CNI conf dir
	CNIBin   string // the node's CNI bin dir
	// Cgroup is the cgroup parent of the node's pods (a path below each
	// hierarchy's root), emptied and removed at the test's end.
	Cgroup string
	holder *proctest.Proc // with PrivateRun: keeps the node's mount namespace
}

// NodeOptions are what a suite needs of its node beyond the netns.
type NodeOptions struct {
	// PrivateRun gives the node a mount namespace of its own, kept by a
	// holder process: a tmpfs /run (a runtime's sockets and state, the
	// shims' sockets, the pods' netns mounts under /run/netns, the agent's
	// socket and state under /run/sluice) and a copy-on-write /var/lib
	// (libcni's cache). Every process of the node runs through Command;
	// the test reaches the node's files through Path.
	PrivateRun bool
	// ReachableSocket puts the agent's socket below a dir any uid can
	// reach (a test's temp dir is not), so loosening the socket's own dir
	// and mode is all it takes to expose it. Not with PrivateRun.
	ReachableSocket bool
}

// NewNode makes a node; it skips the test when not root.
func NewNode(t testing.TB) *Node { return NewNodeWith(t, NodeOptions{}) }

var nodes atomic.Int64

// NewNodeWith makes a node with opts; it skips the test when not root.
func NewNodeWith(t testing.TB, opts NodeOptions) *Node {
	t.Helper()
	nstest.RequireRoot(t)
	dir := t.TempDir()
	if opts.PrivateRun {
		// Short: unix socket paths under it must stay below 108 bytes.
		var err error
		if dir, err = os.MkdirTemp("", "sluice-agentnode-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	n := &Node{T: t, Dir: dir, NS: nstest.New(t, "node"), Root: filepath.Join(dir, "netns"),
		Socket: filepath.Join(dir, "run", "agent.sock"), StateDir: filepath.Join(dir, "state"),
		ConfDir: filepath.Join(dir, "net.d"), CNIBin: filepath.Join(dir, "cni-bin"),
		Cgroup: fmt.Sprintf("/sluice-agenttest-%d-%d", os.Getpid(), nodes.Add(1))}
	dirs := []string{n.Root, n.ConfDir, n.CNIBin}
	if opts.PrivateRun {
		// The node's own /run holds them (the holder makes the dirs).
		n.Root, n.Socket, n.StateDir = "/run/netns", "/run/sluice/agent.sock", "/run/sluice/state"
		dirs = dirs[1:]
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(n.removeCgroup)
	if opts.ReachableSocket {
		base, err := os.MkdirTemp("", "sluice-agent-sock-")
		if err == nil {
			err = os.Chmod(base, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(base) })
		n.Socket = filepath.Join(base, "run", "agent.sock")
	}
	if opts.PrivateRun {
		n.hold()
	}
	return n
}

// removeCgroup kills what is left in the node's cgroup and removes it, in
// every hierarchy.
func (n *Node) removeCgroup() {
	hs, err := nstest.CgroupHierarchies()
	if err == nil {
		err = nstest.KillCgroup(hs, n.Cgroup, 10*time.Second)
	}
	if err == nil {
		err = nstest.RemoveCgroup(hs, n.Cgroup, 5*time.Second)
	}
	if err != nil {
		n.T.Error(err)
	}
}

// Pod makes a pod netns under the node's netns root.
func (n *Node) Pod(name string) *nstest.NS { return nstest.NewIn(n.T, n.Root, name) }

// Status asks the agent's CNI service for its status, as the plugin's
// STATUS does.
func (n *Node) Status() (*sluicev1.StatusResponse, error) {
	conn, err := grpc.NewClient("unix://"+n.Path(n.Socket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return sluicev1.NewCNIClient(conn).Status(ctx, &sluicev1.StatusRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_1})
}

// Client is a direct gRPC connection to the agent, as grpcurl would make,
// closed at the test's end.
func (n *Node) Client() *grpc.ClientConn {
	conn, err := grpc.NewClient("unix://"+n.Path(n.Socket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.T.Fatal(err)
	}
	n.T.Cleanup(func() { conn.Close() })
	return conn
}

// Workloads lists what the agent has enrolled.
func (n *Node) Workloads(t testing.TB) []*sluicev1.Workload {
	t.Helper()
	resp, err := sluicev1.NewDebugClient(n.Client()).ListWorkloads(t.Context(), &sluicev1.ListWorkloadsRequest{})
	if err != nil {
		t.Fatalf("ListWorkloads: %v", err)
	}
	return resp.Workloads
}

// HTTPGet fetches url from inside the node netns (the agent's health
// endpoint listens there).
func (n *Node) HTTPGet(url string) (int, string, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			return n.NS.Dial(network, addr, 2*time.Second)
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
