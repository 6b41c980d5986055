package ztunnel

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// A removed ZDS socket is listened on again at the same path, within the
// 10 s an operator is promised: a restarted ztunnel connects and is sent its
// snapshot, while the ztunnel connected before the removal keeps its
// connection and is still sent pods.
func TestRemovedSocketIsListenedAgain(t *testing.T) {
	h := start(t, nil)
	old := connectZtunnel(t, h.path)
	old.snapshot()
	h.connected(1)
	if err := os.Remove(h.path); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 10*time.Second, func() bool {
		ok, _ := h.srv.SocketOurs()
		return ok
	}, "the removed socket was not listened on again within 10 s")
	fi, err := os.Lstat(h.path)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket listened on again: %v %v, want a socket with 0600", fi, err)
	}
	restarted := connectZtunnel(t, h.path)
	if got := kinds(restarted.snapshot()); !slices.Equal(got, []string{"snapshot_sent"}) {
		t.Fatalf("snapshot on the new socket: %v", got)
	}
	h.connected(2)
	old.expectOpen()
	if n := h.srv.SocketRestores(); n != 1 {
		t.Fatalf("%d socket restores counted, want 1", n)
	}
	// Pods go to the newest ztunnel, deletions to both: the old connection
	// still serves.
	w, ino := h.pod("a")
	h.addAcked(restarted, w, ino)
	errc := h.del(t.Context(), w.UID)
	for _, z := range []*fakeZtunnel{restarted, old} {
		if r := z.recv(); r.String() != "del:"+w.UID {
			t.Fatalf("ztunnel got %s, want del:%s", r, w.UID)
		}
		z.ack("")
	}
	if err := <-errc; err != nil {
		t.Fatalf("Del: %v", err)
	}
}

// A socket path someone else's socket took (renamed over ours, so the path
// never goes missing) is never removed or listened over: it stays theirs,
// whoever dials it reaches them, and the liveness check keeps saying the
// path is not ours. Held for ten socket checks.
func TestReplacedSocketIsLeftAlone(t *testing.T) {
	const check = 50 * time.Millisecond
	h := start(t, func(c *Config) { c.SocketCheck = check })
	tmp := filepath.Join(filepath.Dir(h.path), "other.sock")
	other, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: tmp, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := os.Rename(tmp, h.path); err != nil {
		t.Fatal(err)
	}
	theirs := inode(t, h.path)
	time.Sleep(10 * check) // what is under test is that nothing happens
	if ok, _ := h.srv.SocketOurs(); ok {
		t.Fatal("SocketOurs() = true with another's socket at the path")
	}
	if got := inode(t, h.path); got != theirs {
		t.Fatalf("another's socket at the path was replaced (inode %d, theirs %d)", got, theirs)
	}
	accepted := make(chan struct{})
	go func() {
		if c, err := other.Accept(); err == nil {
			c.Close()
			close(accepted)
		}
	}()
	dialZtunnel(t, h.path)
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("a dial of the path did not reach the socket that took it")
	}
	if n := h.srv.Accepted(); n != 0 {
		t.Fatalf("the server accepted %d connections, want 0", n)
	}
	if n := h.srv.SocketRestores(); n != 0 {
		t.Fatalf("%d socket restores counted, want 0", n)
	}
}
