package connlimit

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Past the connection bound, Accept waits for a connection to close.
func TestConnectionBound(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	raw, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l := Listener(raw, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first := <-accepted
	<-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted past the bound of 2")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	first.Close() // a second Close gives back nothing more
	select {
	case <-accepted:
	case <-time.After(3 * time.Second):
		t.Fatal("the waiting connection was not accepted after one closed")
	}
	if len(l.(*listener).slots) != 2 {
		t.Fatalf("slots held: %d", len(l.(*listener).slots))
	}
}

// One peer holds at most n connections: past that its new ones are closed
// at once, while another address is still served.
func TestPerPeer(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := PerPeer(raw, 2, ByIP)
	defer l.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(from string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial("127.0.0.1")
	dial("127.0.0.1")
	<-accepted
	second := <-accepted
	third := dial("127.0.0.1")
	third.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := third.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a third connection from one peer was kept open: %v", err)
	}
	dial("127.0.0.2")
	select {
	case c := <-accepted:
		if got := ByIP(c); got != "127.0.0.2" {
			t.Fatalf("accepted a connection from %s, want 127.0.0.2", got)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("another peer was not served")
	}
	second.Close()
	dial("127.0.0.1")
	select {
	case <-accepted:
	case <-time.After(3 * time.Second):
		t.Fatal("the peer was not served again once one of its connections closed")
	}
}

// A connection from a process of this namespace is keyed by the uid that
// owns its socket as well as its address: the kubelet's probes and a local
// user's connections come from the same node address.
func TestByIPAndLocalOwner(t *testing.T) {
	s, err := accepted(t, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	want := "127.0.0.1 uid " + strconv.Itoa(os.Geteuid())
	if got := ByIPAndLocalOwner(s); got != want {
		t.Fatalf("key = %q, want %q", got, want)
	}
}

// accepted dials a listener on addr from this process and returns the
// server's side of the connection; all of it closes when t ends.
func accepted(t *testing.T, addr string) (net.Conn, error) {
	t.Helper()
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { raw.Close() })
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := raw.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, nil
}
