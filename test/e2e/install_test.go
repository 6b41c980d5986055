package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// bridgeOnly is the primary CNI's own conflist, before sluice.
func (n *node) bridgeOnly() []byte {
	full := string(n.conflist("1.0.0", ""))
	i := strings.Index(full, `,
    {"type": "sluice"`)
	return []byte(full[:i] + "\n  ]\n}\n")
}

// The agent installs the real plugin into the node's CNI dirs; libcni then
// loads the dir and runs a pod through the chain, captured; the agent keeps
// its conflist first and following the primary, and removes it on SIGTERM
// (standalone), the primary never edited.
func TestInstalledChainCapturesAndUninstalls(t *testing.T) {
	n := newNode(t)
	primaryPath := filepath.Join(n.ConfDir, "10-bridge.conflist")
	primary := n.bridgeOnly()
	if err := os.WriteFile(primaryPath, primary, 0o644); err != nil {
		t.Fatal(err)
	}
	a := n.startAgent("--install=true")
	if _, err := os.Stat(filepath.Join(n.CNIBin, "sluice")); err != nil {
		t.Fatalf("plugin not installed: %v", err)
	}

	conf, err := libcni.LoadConfList(n.ConfDir, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	if last := conf.Plugins[len(conf.Plugins)-1].Network.Type; last != "sluice" {
		t.Fatalf("last plugin is %q, want sluice", last)
	}
	c := &cni{NS: n.NS, Conf: conf, Lib: libcni.NewCNIConfigWithCacheDir([]string{n.CNIBin, binDir}, t.TempDir(), nil)}
	pod := n.Pod("inst")
	if _, err := c.Add(rt("inst1", pod)); err != nil {
		t.Fatalf("ADD through the installed chain: %v", err)
	}
	p := startProxy(t, pod, "15001")
	if _, err := dialFrom(t, pod, "10.96.0.10:443"); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "10.96.0.10:443")

	// The primary's CNI rewrites its file: ours, still first, follows it.
	rewritten := bytes.Replace(primary, []byte(`"isGateway": true`), []byte(`"isGateway": true, "hairpinMode": true`), 1)
	if err := os.WriteFile(primaryPath, rewritten, 0o644); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, time.Second, func() bool {
		b, _ := os.ReadFile(n.ownedConflist("10-bridge.conflist"))
		return bytes.Contains(b, []byte(`"sluice"`)) && bytes.Contains(b, []byte(`"hairpinMode": true`))
	}, "sluice's conflist did not follow the rewritten primary")
	primary = rewritten

	if err := c.Del(rt("inst1", pod)); err != nil {
		t.Fatal(err)
	}
	a.Stop(t)
	if b, _ := os.ReadFile(primaryPath); !bytes.Equal(b, primary) {
		t.Fatalf("after SIGTERM the primary is not as its CNI wrote it:\n%s", b)
	}
	if _, err := os.Lstat(n.ownedConflist("10-bridge.conflist")); !os.IsNotExist(err) {
		t.Fatalf("sluice's conflist left after SIGTERM (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(n.CNIBin, "sluice")); err != nil {
		t.Fatal("binary removed on exit; pods may still need it for DEL")
	}
}

// /readyz follows the installer: an invalid primary written by someone
// else keeps the agent not ready, untouched, and is no reason to edit the
// next file (99-loopback.conf); once fixed, it is ready.
func TestReadyzFollowsInstaller(t *testing.T) {
	n := newNode(t)
	primaryPath := filepath.Join(n.ConfDir, "10-bridge.conflist")
	garbage := []byte(`{"cniVersion": "1.0.0", "name": "e2e", "plugins": [`)
	if err := os.WriteFile(primaryPath, garbage, 0o644); err != nil {
		t.Fatal(err)
	}
	loopbackPath := filepath.Join(n.ConfDir, "99-loopback.conf")
	loopback := []byte(`{"cniVersion": "1.0.0", "name": "lo", "type": "loopback"}`)
	if err := os.WriteFile(loopbackPath, loopback, 0o644); err != nil {
		t.Fatal(err)
	}
	n.startAgentNotReady("--install=true")
	nstest.Eventually(t, 5*time.Second, func() bool {
		code, body, err := n.HTTPGet("http://127.0.0.1:9890/readyz")
		return err == nil && code == 503 && strings.Contains(body, "installer")
	}, "/readyz not 503 naming the installer")
	if b, _ := os.ReadFile(primaryPath); !bytes.Equal(b, garbage) {
		t.Fatal("installer touched an invalid file it does not own")
	}
	if b, _ := os.ReadFile(loopbackPath); !bytes.Equal(b, loopback) {
		t.Fatal("installer moved to the next file while the primary was invalid")
	}
	if entries, _ := os.ReadDir(n.ConfDir); len(entries) != 2 {
		t.Fatalf("installer created files while the primary was invalid: %v", entries)
	}
	if resp, err := n.Status(); err != nil || resp.Ready || !strings.Contains(resp.Reason, "installer") {
		t.Fatalf("STATUS = %v %v, want not ready because of the installer", resp, err)
	}
	if err := os.WriteFile(primaryPath, n.bridgeOnly(), 0o644); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 5*time.Second, func() bool {
		code, _, err := n.HTTPGet("http://127.0.0.1:9890/readyz")
		return err == nil && code == 200
	}, "/readyz not 200 after the primary was fixed")
}
