package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// containerdBridge is the primary CNI's bridge; it lives in the node netns.
const containerdBridge = "sluice-ctd0"

// Debian's containerd with its CRI plugin, driven by crictl, runs a pod
// sandbox through the chain the sluice installer built (bridge + host-local,
// then sluice): the sandbox's netns gets the sluice ruleset, a connection
// from it lands on the proxy with its original destination, and stopping
// and removing the sandbox DELs cleanly (containerd DELs twice).
func TestContainerdSandboxCaptured(t *testing.T) {
	n := newNode(t)
	requireRuntimeBinaries(t)
	crictl := ensureCrictl(t)

	// containerd runs the primary chain and its own loopback from bin_dir.
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		copyExecutable(t, filepath.Join(binDir, p), filepath.Join(n.CNIBin, p))
	}
	primary := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "containerd-e2e",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "dataDir": %q,
              "ranges": [[{"subnet": "10.99.0.0/24"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}}
  ]
}`, containerdBridge, filepath.Join(t.TempDir(), "ipam"))
	primaryPath := filepath.Join(n.ConfDir, "10-containerd-e2e.conflist")
	if err := os.WriteFile(primaryPath, []byte(primary), 0o644); err != nil {
		t.Fatal(err)
	}
	// Ready means the installer's conflist is in place, so containerd's
	// first load of the conf dir already sees sluice.
	n.startAgent("--install=true", "--netns-roots", "/var/run/netns,/run/netns")
	if b, _ := os.ReadFile(n.ownedConflist(filepath.Base(primaryPath))); !strings.Contains(string(b), `"sluice"`) {
		t.Fatalf("agent ready but no sluice entry in the installer's conflist:\n%s", b)
	}

	c := n.startContainerd(crictl)

	podConf := filepath.Join(c.dir, "pod.json")
	if err := os.WriteFile(podConf, fmt.Appendf(nil, `{
  "metadata": {"name": "ctd-pod", "namespace": "ctd-ns", "uid": "uid-ctd-pod", "attempt": 0},
  "hostname": "ctd-pod",
  "linux": {"cgroup_parent": %q, "security_context": {"namespace_options": {"network": 0}}}
}`, n.Cgroup), 0o644); err != nil {
		t.Fatal(err)
	}
	podID, netnsPath := c.runPod(podConf)
	t.Logf("sandbox %s in %s", podID, netnsPath)
	pod := &nstest.NS{Name: "ctd-pod", Path: netnsPath}

	// The bridge is the node's, never the machine's.
	if _, err := netlink.LinkByName(containerdBridge); err == nil {
		t.Fatalf("bridge %s is in the host netns", containerdBridge)
	}
	if err := n.NS.Do(func() error { _, err := netlink.LinkByName(containerdBridge); return err }); err != nil {
		t.Fatalf("bridge %s not in the node netns: %v", containerdBridge, err)
	}

	if got := rulesetState(t, pod); got != "full" {
		t.Fatalf("sandbox netns %s ruleset: %s", netnsPath, got)
	}
	ws := n.Workloads(t)
	if len(ws) != 1 {
		t.Fatalf("agent lists %d workloads, want 1: %v", len(ws), ws)
	}
	w := ws[0]
	if w.ContainerId != podID || w.Pod.GetNamespace() != "ctd-ns" || w.Pod.GetName() != "ctd-pod" ||
		w.Pod.GetUid() != "uid-ctd-pod" || w.IfName != "eth0" || w.Netns != netnsPath {
		t.Fatalf("workload = %v, want container %s pod ctd-ns/ctd-pod uid-ctd-pod eth0 in %s", w, podID, netnsPath)
	}

	p := startProxy(t, pod, "15001")
	if got, err := dialFrom(t, pod, "10.96.0.10:80"); err != nil || got != "proxied\n" {
		t.Fatalf("connect from the sandbox: %q %v", got, err)
	}
	p.expect(t, "10.96.0.10:80")

	c.MustCrictl("stopp", podID)
	c.MustCrictl("rmp", podID)
	if _, err := os.Stat(netnsPath); !os.IsNotExist(err) {
		t.Fatalf("sandbox netns %s still there after rmp: %v", netnsPath, err)
	}
	if left := cniCacheEntries(podID); len(left) > 0 {
		t.Fatalf("libcni results left after rmp, so a DEL did not complete: %v", left)
	}
	if ws := n.Workloads(t); len(ws) != 0 {
		t.Fatalf("agent still lists workloads after rmp: %v", ws)
	}
	dels := n.agent.Logs.Lines("method=/sluice.v1.CNI/Del", "container_id="+podID)
	if len(dels) < 2 {
		t.Fatalf("agent saw %d DELs for %s, want containerd's two:\n%s", len(dels), podID, n.agent.Logs)
	}
	for _, l := range dels {
		if !strings.Contains(l, "code=OK") {
			t.Fatalf("DEL not OK: %s", l)
		}
	}
}

func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
