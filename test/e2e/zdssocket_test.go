package e2e

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/api/zds"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// Someone removes the agent's ZDS socket and ztunnel then restarts: within
// 10 s of the removal the agent listens at the path again, the restarted
// ztunnel connects and is sent the node's pods, and an ambient pod's ADD
// through the real plugin is handed to it. The restore is counted and
// logged, and liveness stays (or is back) green: no agent restart needed.
func TestZDSSocketRemovedListenedAgain(t *testing.T) {
	n := newNode(t)
	zsock := filepath.Join(t.TempDir(), "ztunnel", "ztunnel.sock")
	a := n.startAgent("--ambient", "--default-mode", "ambient", "--host-netns", n.NS.Path, "--ztunnel-socket", zsock)
	z := connectZDS(t, zsock)
	if req, _ := z.next(); req.GetSnapshotSent() == nil {
		t.Fatalf("first message %v, want an empty snapshot", req)
	}
	c := n.cni(n.conflist("1.1.0", ""))
	before := n.Pod("zds-before")
	addVia(t, c, z, "zdsbefore1", before, "uid-zds-before")

	if err := os.Remove(zsock); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	z.uc.Close() // ztunnel restarts
	z = redialZDS(t, zsock, 10*time.Second)
	if req, _ := z.next(); req.GetAdd().GetUid() != "uid-zds-before" {
		t.Fatalf("snapshot on the new socket starts with %v, want Add uid-zds-before", req)
	}
	if req, _ := z.next(); req.GetSnapshotSent() == nil {
		t.Fatalf("snapshot not closed: %v", req)
	}
	after := n.Pod("zds-after")
	addVia(t, c, z, "zdsafter1", after, "uid-zds-after")
	if took := time.Since(lost); took > 10*time.Second {
		t.Fatalf("ambient ADD served %v after the socket was removed, want within 10 s", took)
	}
	t.Logf("ZDS socket removed; a restarted ztunnel took an ADD after %v", time.Since(lost).Round(time.Millisecond))
	n.expectInSync(t, "zdsafter1")

	restoredAtLeast(t, n, "zds_socket", 1)
	if got := a.Logs.Count("ZDS socket removed; listening again", "WARN"); got != 1 {
		t.Errorf("%d WARN lines 'ZDS socket removed; listening again', want 1", got)
	}
	nstest.Eventually(t, 5*time.Second, func() bool {
		code, _, err := n.HTTPGet("http://127.0.0.1:9890/healthz")
		return err == nil && code == 200
	}, "/healthz not live once the ZDS socket was listened on again")
	a.Alive(t)
}

// A removed agent socket is listened on again the same way: the plugin's
// ADD reaches the agent within 10 s, with no agent restart.
func TestAgentSocketRemovedListenedAgain(t *testing.T) {
	n := newNode(t)
	a := n.startAgent()
	if err := os.Remove(n.Socket); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 10*time.Second, func() bool {
		_, err := n.Status()
		return err == nil
	}, "the agent socket was not listened on again within 10 s")
	c := n.cni(n.conflist("1.1.0", ""))
	pod := n.Pod("sock-after")
	if _, err := c.Add(rt("sockafter1", pod)); err != nil {
		t.Fatalf("ADD after the agent socket was listened on again: %v", err)
	}
	n.expectInSync(t, "sockafter1")
	restoredAtLeast(t, n, "agent_socket", 1)
	if got := a.Logs.Count("agent socket removed; listening again", "WARN"); got != 1 {
		t.Errorf("%d WARN lines 'agent socket removed; listening again', want 1", got)
	}
	a.Alive(t)
}

// addVia runs an ambient ADD of pod through the chain, expecting ztunnel
// stand-in z to be handed uid.
func addVia(t *testing.T, c *cni, z *zdsClient, id string, pod *nstest.NS, uid string) {
	t.Helper()
	added := make(chan error, 1)
	go func() { _, err := c.Add(rt(id, pod)); added <- err }()
	if req, ino := z.next(); req.GetAdd().GetUid() != uid || ino != netnsInode(t, pod) {
		t.Fatalf("ztunnel got %v with netns inode %d, want Add %s", req, ino, uid)
	}
	if err := <-added; err != nil {
		t.Fatalf("ADD %s: %v", id, err)
	}
}

// redialZDS is a restarted ztunnel: it dials path until it connects, as
// ztunnel retries, for at most within, and says hello.
func redialZDS(t *testing.T, path string, within time.Duration) *zdsClient {
	t.Helper()
	var uc *net.UnixConn
	var last error
	nstest.Eventually(t, within, func() bool {
		uc, last = net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		return last == nil
	}, "ztunnel: no connection to %s (last: %v)", path, lastSeen(func() any { return last }))
	t.Cleanup(func() { uc.Close() })
	z := &zdsClient{t: t, uc: uc}
	z.send(&zds.ZdsHello{Version: zds.Version_V1})
	return z
}
