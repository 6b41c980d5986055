package ztunnel

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// An idle connection outlives every deadline the server sets: ztunnel holds
// one connection for the node's life, and each drop makes it go not-ready
// and take a whole snapshot again. Held idle for three times Timeout plus
// Keepalive, after the snapshot and again after a request, it is the same
// connection, with no reconnect, and it still serves.
func TestIdleConnectionIsKept(t *testing.T) {
	const timeout, keepalive = 200 * time.Millisecond, 50 * time.Millisecond
	h := start(t, func(c *Config) { c.Timeout, c.Keepalive = timeout, keepalive })
	z := connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)

	idle := func(when string) {
		t.Helper()
		// Time is what is under test here, not a wait for a condition.
		time.Sleep(3 * (timeout + keepalive))
		if n := h.srv.Connections(); n != 1 {
			t.Fatalf("%s: %d connections after idling, want 1", when, n)
		}
		if ok, why := h.srv.Ready(); !ok {
			t.Fatalf("%s: not ready after idling: %s", when, why)
		}
		z.expectOpen()
	}
	idle("after the snapshot")

	w, ino := h.pod("a")
	h.addAcked(z, w, ino)
	idle("after an add")

	errc := h.del(context.Background(), w.UID)
	if r := z.recv(); r.String() != "del:"+w.UID {
		t.Fatalf("ztunnel got %s, want del:%s", r, w.UID)
	}
	z.ack("")
	if err := <-errc; err != nil {
		t.Fatalf("Del: %v", err)
	}
	idle("after a del")

	if accepted := h.srv.Accepted(); accepted != 1 {
		t.Errorf("%d connections accepted, want 1", accepted)
	}
}

// expectOpen fails if the server has hung up or sent anything.
func (z *fakeZtunnel) expectOpen() {
	z.t.Helper()
	raw, err := z.uc.SyscallConn()
	if err != nil {
		z.t.Fatal(err)
	}
	var n int
	var rerr error
	var b [1]byte
	if err := raw.Control(func(fd uintptr) {
		n, _, rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}); err != nil {
		z.t.Fatal(err)
	}
	switch {
	case errors.Is(rerr, unix.EAGAIN):
	case rerr != nil:
		z.t.Fatalf("ztunnel: connection failed: %v", rerr)
	case n == 0:
		z.t.Fatal("ztunnel: the server hung up on an idle connection")
	default:
		z.t.Fatal("ztunnel: the server sent a packet nobody asked for")
	}
}
