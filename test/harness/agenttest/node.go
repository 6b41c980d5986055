package agenttest

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// Node is one simulated node: a netns playing the host, in which the agent
// and the CNI chain run, a dir of pod netns mounts (the agent's
// --netns-roots) and the agent's socket and state dir, all under the
// test's temp dir, so the machine's own network and files are never
// touched.
type Node struct {
	T        testing.TB
	Dir      string
	NS       *nstest.NS
	Root     string // pod netns mounts
	Socket   string
	StateDir string
}

// NewNode makes a node; it skips the test when not root.
func NewNode(t testing.TB) *Node {
	t.Helper()
	nstest.RequireRoot(t)
	dir := t.TempDir()
	n := &Node{T: t, Dir: dir, NS: nstest.New(t, "node"), Root: filepath.Join(dir, "netns"),
		Socket: filepath.Join(dir, "run", "agent.sock"), StateDir: filepath.Join(dir, "state")}
	if err := os.MkdirAll(n.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

// Pod makes a pod netns under the node's netns root.
func (n *Node) Pod(name string) *nstest.NS { return nstest.NewIn(n.T, n.Root, name) }

// Status asks the agent's CNI service for its status, as the plugin's
// STATUS does.
func (n *Node) Status() (*sluicev1.StatusResponse, error) {
	conn, err := grpc.NewClient("unix://"+n.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
	conn, err := grpc.NewClient("unix://"+n.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
