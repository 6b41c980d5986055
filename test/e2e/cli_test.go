package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func agentCLI(t *testing.T, n *node, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "sluice-agent"), append(args, "--socket", n.Socket)...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("sluice-agent %v: %v", args, err)
	return "", 0
}

// The operator's look-ups: get by pod and by the id prefix workloads
// prints, explain, version; a prefix that names two is refused by name.
func TestCLILookups(t *testing.T) {
	n := newNode(t)
	n.startAgent("--exclude-namespaces", "kube-system")
	c := n.cni(n.loopbackChain("2s"))
	for _, id := range []string{"cafe0001aaaa", "cafe0002bbbb"} {
		if _, err := c.Add(rt(id, n.Pod(id))); err != nil {
			t.Fatal(err)
		}
	}
	list, _ := agentCLI(t, n, "workloads")
	if !strings.Contains(list, "cafe0001aaaa") {
		t.Fatalf("workloads:\n%s", list)
	}
	for _, arg := range []string{"cafe0001", "cafe0001aaaa"} {
		out, code := agentCLI(t, n, "get", arg)
		if code != 0 || !strings.Contains(out, "container     cafe0001aaaa") || !strings.Contains(out, "in sync") ||
			!strings.Contains(out, "table inet sluice") {
			t.Errorf("get %s: exit %d\n%s", arg, code, out)
		}
	}
	if out, code := agentCLI(t, n, "get", "cafe"); code != 1 || !strings.Contains(out, "matches 2 attachments") {
		t.Errorf("get of an ambiguous prefix: exit %d\n%s", code, out)
	}
	if out, code := agentCLI(t, n, "get", "nope"); code != 1 || !strings.Contains(out, "NotFound") {
		t.Errorf("get of an unknown id: exit %d\n%s", code, out)
	}
	if out, code := agentCLI(t, n, "explain", "kube-system/coredns"); code != 0 || !strings.Contains(out, "capture  no") ||
		!strings.Contains(out, "kube-system is excluded") {
		t.Errorf("explain in an excluded namespace (standalone): exit %d\n%s", code, out)
	}
	if out, code := agentCLI(t, n, "explain", "shop/cart"); code != 0 || !strings.Contains(out, "capture  yes, sidecar mode") {
		t.Errorf("explain: exit %d\n%s", code, out)
	}
	if out, code := agentCLI(t, n, "version"); code != 0 || strings.Count(out, "sluice-agent (") != 2 {
		t.Errorf("version: exit %d\n%s", code, out)
	}
}

// status exits 1 when the agent is not ready (here: the primary CNI config
// it must chain into does not parse), so scripts and exec probes can use it.
func TestCLIStatusExitsNonZeroWhenNotReady(t *testing.T) {
	n := newNode(t)
	if err := os.WriteFile(filepath.Join(n.ConfDir, "10-broken.conflist"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.startAgentNotReady("--install=true")
	out, code := agentCLI(t, n, "status")
	if code != 1 || !strings.Contains(out, "ready      no: ") {
		t.Errorf("status of a not-ready agent: exit %d\n%s", code, out)
	}
}

// Polled calls (CNI STATUS, health checks, `sluice-agent status`) stay out
// of the info log and show at debug; an ADD logs its decision at info.
func TestPolledCallsLogAtDebug(t *testing.T) {
	for _, level := range []string{"info", "debug"} {
		t.Run(level, func(t *testing.T) {
			n := newNode(t)
			n.startAgent("--log-level", level)
			for range 3 {
				if _, code := agentCLI(t, n, "status"); code != 0 {
					t.Fatal("status failed")
				}
			}
			c := n.cni(n.loopbackChain("2s"))
			if _, err := c.Add(rt("quiet1", n.Pod("quiet1"))); err != nil {
				t.Fatal(err)
			}
			status := n.agent.Logs.Lines("msg=call", "/sluice.v1.CNI/Status")
			if level == "info" && len(status) != 0 || level == "debug" && len(status) < 3 {
				t.Errorf("at %s, %d STATUS call lines:\n%s", level, len(status), n.agent.Logs)
			}
			if got := n.agent.Logs.Lines(`msg="pod enrolled"`, "container_id=quiet1", "mode=sidecar"); len(got) != 1 {
				t.Errorf("at %s, no decision line for the ADD:\n%s", level, n.agent.Logs)
			}
		})
	}
}
