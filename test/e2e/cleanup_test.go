package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// `sluice-agent cleanup` with the agent's own flags: refused while the agent
// runs; once it stopped (keeping everything, as an upgrade does), it
// removes the pod's capture table, its conflist, the plugin, the
// journal and the socket, and nothing else: the primary conflist is as it
// was before sluice, another plugin and another nft table stay, the pod
// keeps its address. A second run finds nothing to do and succeeds.
func TestCleanupRestoresTheNode(t *testing.T) {
	n := newNode(t)
	primaryPath := filepath.Join(n.ConfDir, "10-bridge.conflist")
	primary := n.bridgeOnly()
	if err := os.WriteFile(primaryPath, primary, 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(n.CNIBin, "other-plugin")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--install=true", "--uninstall-on-exit=false"}
	a := n.startAgent(flags...)
	conf, err := libcni.LoadConfList(n.ConfDir, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	c := &cni{NS: n.NS, Conf: conf, Lib: libcni.NewCNIConfigWithCacheDir([]string{n.CNIBin, binDir}, t.TempDir(), nil)}
	pod := n.Pod("clean")
	if _, err := c.Add(rt("clean1", pod)); err != nil {
		t.Fatal(err)
	}
	pod.Run(t, "nft", "add", "table", "inet", "someone-elses")
	cleanup := func() (string, error) {
		out, err := n.NS.Command(filepath.Join(binDir, "sluice-agent"), append([]string{"cleanup"}, n.agentArgs(flags...)...)...).CombinedOutput()
		return string(out), err
	}

	if out, err := cleanup(); err == nil || !strings.Contains(out, "an agent is running") {
		t.Fatalf("cleanup under a running agent: %v\n%s", err, out)
	}
	pod.Run(t, "nft", "list", "table", "inet", "sluice") // still there
	a.Stop(t)
	if _, err := os.Stat(filepath.Join(n.CNIBin, "sluice")); err != nil {
		t.Fatalf("the agent removed its plugin on a plain stop: %v", err)
	}

	if out, err := cleanup(); err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}
	if err := pod.Command("nft", "list", "table", "inet", "sluice").Run(); err == nil {
		t.Error("the pod's sluice table is still there")
	}
	pod.Run(t, "nft", "list", "table", "inet", "someone-elses")
	if !strings.Contains(pod.Run(t, "ip", "-4", "addr", "show", "eth0"), "inet ") {
		t.Error("the pod lost its address")
	}
	if b, _ := os.ReadFile(primaryPath); !bytes.Equal(b, primary) {
		t.Errorf("primary conflist after cleanup:\n%s\nwant as before sluice:\n%s", b, primary)
	}
	if _, err := os.Lstat(n.ownedConflist("10-bridge.conflist")); !os.IsNotExist(err) {
		t.Errorf("sluice's conflist left after cleanup (%v)", err)
	}
	for _, gone := range []string{filepath.Join(n.CNIBin, "sluice"), n.StateDir, n.Socket} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s left after cleanup (%v)", gone, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("cleanup removed another plugin: %v", err)
	}
	if out, err := cleanup(); err != nil {
		t.Errorf("a second cleanup: %v\n%s", err, out)
	}
}

// The uninstall path: an agent that leaves the node with
// --cleanup-on-uninstall removes what cleanup does as it exits.
func TestCleanupOnUninstall(t *testing.T) {
	n := newNode(t)
	primaryPath := filepath.Join(n.ConfDir, "10-bridge.conflist")
	primary := n.bridgeOnly()
	if err := os.WriteFile(primaryPath, primary, 0o644); err != nil {
		t.Fatal(err)
	}
	a := n.startAgent("--install=true", "--uninstall-on-exit=true", "--cleanup-on-uninstall=true")
	conf, err := libcni.LoadConfList(n.ConfDir, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	c := &cni{NS: n.NS, Conf: conf, Lib: libcni.NewCNIConfigWithCacheDir([]string{n.CNIBin, binDir}, t.TempDir(), nil)}
	pod := n.Pod("leave")
	if _, err := c.Add(rt("leave1", pod)); err != nil {
		t.Fatal(err)
	}
	a.Stop(t)
	if err := pod.Command("nft", "list", "table", "inet", "sluice").Run(); err == nil {
		t.Error("the pod's sluice table outlived the agent's uninstall")
	}
	if b, _ := os.ReadFile(primaryPath); !bytes.Equal(b, primary) {
		t.Errorf("primary conflist after uninstall:\n%s", b)
	}
	if _, err := os.Lstat(n.ownedConflist("10-bridge.conflist")); !os.IsNotExist(err) {
		t.Errorf("sluice's conflist left after the agent's uninstall (%v)", err)
	}
	for _, gone := range []string{filepath.Join(n.CNIBin, "sluice"), n.StateDir, n.Socket} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s left after the agent's uninstall (%v)", gone, err)
		}
	}
}
