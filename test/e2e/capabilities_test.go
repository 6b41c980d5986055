package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemesh/sluice/api/zds"

	"github.com/sluicemesh/sluice/test/harness/agenttest"
	"github.com/sluicemesh/sluice/test/harness/nodetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// The agent runs in its container with exactly the capabilities the
// shipped chart adds (deploy/manifests/sluice.yaml, which hack/helm keeps
// equal to the chart's render). These tests start it with that set as its
// bounding set, as the container runtime does for a root process, and
// hold both directions: every mode works with the set, and each
// capability in it is needed by some mode.

// capScenario is one mode of the agent, run under a capability set; it
// returns what went wrong instead of failing t, so a scenario expected to
// fail without a capability can say so.
type capScenario struct {
	name string
	run  func(t *testing.T, caps []string) error
}

var capScenarios = []capScenario{
	{"sidecar ADD and DEL", capSidecar},
	{"ambient ADD handed to ztunnel", capAmbient},
	{"the installer writes the plugin and the conflist entry", capInstaller},
	{"a pod running before the agent enrolled through /proc", capLatePod},
}

// TestAgentRunsWithTheChartsCapabilities: every mode works under the
// chart's set alone.
func TestAgentRunsWithTheChartsCapabilities(t *testing.T) {
	caps := chartCapabilities(t)
	t.Logf("the chart adds %v", caps)
	for _, s := range capScenarios {
		t.Run(s.name, func(t *testing.T) {
			if err := s.run(t, caps); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestEachChartCapabilityIsNeeded: without any one capability of the
// chart's set some mode fails, so the chart grants nothing that no call
// needs. (NET_RAW and DAC_OVERRIDE, which istio-cni's agent holds, were
// dropped from the chart this way: every scenario passed without them.)
func TestEachChartCapabilityIsNeeded(t *testing.T) {
	caps := chartCapabilities(t)
	for _, c := range caps {
		t.Run(c, func(t *testing.T) {
			without := slices.DeleteFunc(slices.Clone(caps), func(x string) bool { return x == c })
			var failed []string
			for _, s := range capScenarios {
				if err := s.run(t, without); err != nil {
					failed = append(failed, fmt.Sprintf("%s (%.160s)", s.name, firstLine(err.Error())))
				}
			}
			if len(failed) == 0 {
				t.Fatalf("every mode works without %s: the chart grants a capability no call needs", c)
			}
			t.Logf("without %s: %s", c, strings.Join(failed, "; "))
		})
	}
}

// chartCapabilities are the capabilities the shipped manifest's agent
// container adds.
func chartCapabilities(t *testing.T) []string {
	t.Helper()
	root, err := nodetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	caps, err := agenttest.ChartCapabilities(root)
	if err != nil {
		t.Fatal(err)
	}
	return caps
}

// startCapped starts the agent under caps (agenttest.Capped) and waits
// until it is ready.
func (n *node) startCapped(caps []string, extra ...string) error {
	argv := agenttest.Capped(caps, append([]string{filepath.Join(binDir, "sluice-agent")}, n.agentArgs(extra...)...)...)
	cmd := n.NS.Command(argv[0], argv[1:]...)
	if n.agentInHostNetns {
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	n.agent = proctest.Start(n.t, cmd)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := n.Status()
		switch {
		case err == nil && resp.Ready:
			return nil
		case n.agent.Exited():
			return fmt.Errorf("the agent exited:\n%s", n.agent.Logs)
		case time.Now().After(deadline):
			return fmt.Errorf("the agent not ready after 10 s (%v, %+v):\n%s", err, resp, n.agent.Logs)
		}
	}
}

func capSidecar(t *testing.T, caps []string) error {
	n := newNode(t)
	if err := n.startCapped(caps); err != nil {
		return err
	}
	c := n.cni(n.conflist("1.1.0", ""))
	pod := n.Pod("capsc")
	if _, err := c.Add(rt("capsc1", pod)); err != nil {
		return fmt.Errorf("ADD: %w", err)
	}
	if s := rulesetState(t, pod); s != "full" {
		return fmt.Errorf("the pod's ruleset after ADD: %s", s)
	}
	if err := c.Del(rt("capsc1", pod)); err != nil {
		return fmt.Errorf("DEL: %w", err)
	}
	if s := rulesetState(t, pod); s != "none" {
		return fmt.Errorf("the pod's ruleset after DEL: %s", s)
	}
	return nil
}

func capAmbient(t *testing.T, caps []string) error {
	n := newNode(t)
	zsock := filepath.Join(t.TempDir(), "ztunnel", "ztunnel.sock")
	if err := n.startCapped(caps, "--ambient", "--default-mode", "ambient", "--host-netns", n.NS.Path,
		"--ztunnel-socket", zsock, "--ztunnel-connect-wait", "0"); err != nil {
		return err
	}
	z := connectZDS(t, zsock)
	if req, err := zdsRead(z); err != nil || req.GetSnapshotSent() == nil {
		return fmt.Errorf("ztunnel's first message %v (%v), want an empty snapshot", req, err)
	}
	c := n.cni(n.conflist("1.1.0", ""))
	pod := n.Pod("capamb")
	added := make(chan error, 1)
	go func() { _, err := c.Add(rt("capamb1", pod)); added <- err }()
	read := make(chan error, 1)
	go func() {
		req, err := zdsRead(z)
		if err == nil && req.GetAdd().GetUid() != "uid-capamb" {
			err = fmt.Errorf("ztunnel got %v, want Add uid-capamb", req)
		}
		read <- err
	}()
	select {
	case err := <-added:
		if err == nil {
			err = fmt.Errorf("ADD succeeded before ztunnel had the pod")
		}
		return fmt.Errorf("ADD: %w", err)
	case err := <-read:
		if err != nil {
			return err
		}
	}
	if err := <-added; err != nil {
		return fmt.Errorf("ADD: %w", err)
	}
	deleted := make(chan error, 1)
	go func() { deleted <- c.Del(rt("capamb1", pod)) }()
	if req, err := zdsRead(z); err != nil || req.GetDel().GetUid() != "uid-capamb" {
		return fmt.Errorf("ztunnel got %v (%v) on DEL, want Del uid-capamb", req, err)
	}
	return <-deleted
}

// zdsRead reads and acks ztunnel's next request, with an error where
// zdsClient.next fails the test: a scenario run without a capability
// expects the agent to fail.
func zdsRead(z *zdsClient) (*zds.WorkloadRequest, error) {
	z.uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf, oob := make([]byte, 1024), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := z.uc.ReadMsgUnix(buf, oob)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("ztunnel: read: %v (%d bytes)", err, n)
	}
	if oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
			if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil {
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
		}
	}
	req := &zds.WorkloadRequest{}
	if err := proto.Unmarshal(buf[:n], req); err != nil {
		return nil, fmt.Errorf("ztunnel: decode: %w", err)
	}
	ack, _ := proto.Marshal(&zds.WorkloadResponse{Payload: &zds.WorkloadResponse_Ack{Ack: &zds.Ack{}}})
	if _, _, err := z.uc.WriteMsgUnix(ack, nil, nil); err != nil {
		return nil, fmt.Errorf("ztunnel: ack: %w", err)
	}
	return req, nil
}

func capInstaller(t *testing.T, caps []string) error {
	n := newNode(t)
	primaryPath := filepath.Join(n.ConfDir, "10-bridge.conflist")
	if err := os.WriteFile(primaryPath, n.bridgeOnly(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.startCapped(caps, "--install=true"); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(n.CNIBin, "sluice")); err != nil {
		return fmt.Errorf("plugin not installed: %w", err)
	}
	if b, _ := os.ReadFile(n.ownedConflist("10-bridge.conflist")); !bytes.Contains(b, []byte(`"sluice"`)) {
		return fmt.Errorf("no sluice entry in the installer's conflist:\n%s", b)
	}
	return nil
}

func capLatePod(t *testing.T, caps []string) error {
	env, c := sharedKube(t)
	ns := "caps-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-").Replace(t.Name()))
	if len(ns) > 63 {
		ns = ns[len(ns)-63:]
	}
	ns = strings.Trim(ns, "-")
	createNamespace(t, c, ns)
	n := newNode(t)
	ip := nstest.TestIP(t)
	pod := runningPod(t, c, ns, sidecarPod("early", nil), ip)
	sb := n.podSandbox(t, "capearly", pod, ip)
	n.agentInHostNetns = true
	if err := n.startCapped(caps, "--kubeconfig", env.Kubeconfig(t, agentUser), "--node-name", kubeNode,
		"--health-addr", "127.0.0.1:0", "--netns-roots", n.Root+",/proc", "--host-proc", "/proc"); err != nil {
		return err
	}
	id := "late-" + string(pod.UID)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, w := range n.Workloads(t) {
			out, _ := sb.Command("nft", "list", "table", "inet", "sluice").CombinedOutput()
			if w.ContainerId == id && strings.Contains(string(out), "15001") {
				return nil
			}
		}
	}
	return fmt.Errorf("the pod running before the agent was not enrolled within 10 s:\n%s", n.agent.Logs)
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
