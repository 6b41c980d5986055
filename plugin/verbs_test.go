package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"google.golang.org/grpc"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// recordingAgent answers Add over a real gRPC unix socket and keeps what
// it was sent; the agent's own logic is not under test here.
type recordingAgent struct {
	sluicev1.UnimplementedCNIServer
	mu   sync.Mutex
	adds []*sluicev1.AddRequest
}

func (r *recordingAgent) Add(_ context.Context, req *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.adds = append(r.adds, req)
	return &sluicev1.AddResponse{Enrolled: true}, nil
}

func serveAgent(t *testing.T) (string, *recordingAgent) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	a := &recordingAgent{}
	sluicev1.RegisterCNIServer(gs, a)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return sock, a
}

// stdoutOf runs f with os.Stdout captured, as skel prints results there.
func stdoutOf(t *testing.T, f func() error) ([]byte, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	ferr := f()
	os.Stdout = saved
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return out, ferr
}

// TestAddWithoutPrevResult: run as a network of its own (Multus, Istio's
// chained: false) there is no prevResult; like istio-cni the plugin asks
// the agent anyway and returns an empty result instead of failing the pod.
func TestAddWithoutPrevResult(t *testing.T) {
	sock, agent := serveAgent(t)
	stdin, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "sluice", "type": "sluice", "socket": sock})
	out, err := stdoutOf(t, func() error {
		return cmdAdd(&skel.CmdArgs{ContainerID: "c1", Netns: "/var/run/netns/x", IfName: "net1",
			Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p;K8S_POD_UID=u", StdinData: stdin})
	})
	if err != nil {
		t.Fatalf("ADD without prevResult failed: %v", err)
	}
	var res struct {
		CNIVersion string            `json:"cniVersion"`
		IPs        []json.RawMessage `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.CNIVersion != "1.0.0" || len(res.IPs) != 0 {
		t.Fatalf("result %q (%v), want an empty 1.0.0 result", out, err)
	}
	agent.mu.Lock()
	defer agent.mu.Unlock()
	if len(agent.adds) != 1 || len(agent.adds[0].Ips) != 0 || agent.adds[0].ContainerId != "c1" {
		t.Fatalf("agent saw %v, want one ADD for c1 with no IPs", agent.adds)
	}
}
