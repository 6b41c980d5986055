package nri_test

import (
	"context"
	"time"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/test/harness/agenttest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

type agent struct {
	*proctest.Proc
	n *node
}

// startAgent runs the real sluice-agent in the node as an NRI plugin
// (standalone policy unless extra says otherwise) and waits until it is
// connected to containerd.
func (n *node) startAgent(extra ...string) *agent {
	t := n.t
	t.Helper()
	a := n.startAgentNoWait(extra...)
	a.Wait(t, 20*time.Second, func() bool {
		return a.Logs.Count("synchronized with the runtime") > 0
	}, "the agent never synchronized over NRI")
	return a
}

func (n *node) startAgentNoWait(extra ...string) *agent {
	t := n.t
	args := append([]string{agentBinary(t),
		"--trigger", "nri", "--nri-socket", nriSocket,
		"--socket", n.Socket, "--state-dir", n.StateDir,
		"--health-addr", "127.0.0.1:0", "--log-level", "debug",
		// The node's CNI dirs, never the machine's: --trigger nri removes a
		// leftover entry from the conf dir.
		"--cni-conf-dir", n.ConfDir, "--cni-bin-dir", n.CNIBin}, extra...)
	if n.capabilities != nil {
		args = agenttest.Capped(n.capabilities, args...)
	}
	cmd := n.Command(context.Background(), args...)
	if n.agentInHostNetns {
		cmd = n.HostNetCommand(context.Background(), args...)
	}
	a := &agent{Proc: proctest.Start(t, cmd), n: n}
	t.Cleanup(a.stop) // before the harness's SIGKILL: a clean stop first
	return a
}

func (a *agent) checkAlive() { a.Alive(a.n.t) }

// stop sends SIGTERM and waits; SIGKILL after 15s.
func (a *agent) stop() { a.Terminate(15 * time.Second) }

// enrolled is the workload of sandbox id, or nil.
func (n *node) enrolled(id string) *sluicev1.Workload {
	for _, w := range n.Workloads(n.t) {
		if w.ContainerId == id {
			return w
		}
	}
	return nil
}
