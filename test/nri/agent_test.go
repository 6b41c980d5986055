package nri_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/nstest"
)

// agentSocket is the agent's gRPC socket in the node.
const agentSocket = "/run/sluice/agent.sock"

type agent struct {
	n    *node
	cmd  *exec.Cmd
	logs *logBuffer
	done <-chan struct{}
}

// startAgent runs the real sluice-agent in the node as an NRI plugin
// (standalone policy unless extra says otherwise) and waits until it is
// connected to containerd.
func (n *node) startAgent(extra ...string) *agent {
	t := n.t
	t.Helper()
	a := n.startAgentNoWait(extra...)
	nstest.Eventually(t, 20*time.Second, func() bool {
		a.checkAlive()
		return a.logs.count("synchronized with the runtime") > 0
	}, "the agent never synchronized over NRI:\n%s", a.logs)
	return a
}

func (n *node) startAgentNoWait(extra ...string) *agent {
	t := n.t
	args := append([]string{agentBinary(t),
		"--trigger", "nri", "--nri-socket", nriSocket,
		"--socket", agentSocket, "--state-dir", "/run/sluice/state",
		"--health-addr", "127.0.0.1:0", "--log-level", "debug",
		// The node's CNI dirs, never the machine's: --trigger nri removes a
		// leftover entry from the conf dir.
		"--cni-conf-dir", filepath.Join(n.dir, "net.d"), "--cni-bin-dir", filepath.Join(n.dir, "cni-bin")}, extra...)
	cmd := n.command(context.Background(), args...)
	if n.agentInHostNetns {
		cmd = n.commandMountOnly(context.Background(), args...)
	}
	a := &agent{n: n, cmd: cmd, logs: newLogBuffer()}
	a.cmd.Stdout, a.cmd.Stderr = a.logs, a.logs
	var err error
	if a.done, err = startLocked(a.cmd); err != nil {
		t.Fatalf("start sluice-agent: %v", err)
	}
	t.Cleanup(func() {
		a.stop()
		if t.Failed() {
			t.Logf("agent log:\n%s", a.logs)
		}
	})
	return a
}

func (a *agent) checkAlive() {
	select {
	case <-a.done:
		a.n.t.Fatalf("sluice-agent exited:\n%s", a.logs)
	default:
	}
}

// stop sends SIGTERM and waits; SIGKILL after 15s.
func (a *agent) stop() {
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		a.cmd.Process.Kill()
		<-a.done
	}
}

// workloads lists what the agent has enrolled, over its gRPC socket.
func (n *node) workloads() []*sluicev1.Workload {
	t := n.t
	t.Helper()
	conn, err := grpc.NewClient("unix://"+n.path(agentSocket), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := sluicev1.NewDebugClient(conn).ListWorkloads(t.Context(), &sluicev1.ListWorkloadsRequest{})
	if err != nil {
		t.Fatalf("ListWorkloads: %v", err)
	}
	return resp.Workloads
}

// enrolled is the workload of sandbox id, or nil.
func (n *node) enrolled(id string) *sluicev1.Workload {
	for _, w := range n.workloads() {
		if w.ContainerId == id {
			return w
		}
	}
	return nil
}
