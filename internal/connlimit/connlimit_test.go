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

// One peer holds at most PerPeer connections: past that its new ones are
// closed at once, while another address is still served.
func TestFairPerPeer(t *testing.T) {
	l, accepted := fairListener(t, Bounds{Serving: 8, Waiting: 8, PerPeer: 2}, ByIP)
	dial(t, l, "127.0.0.1")
	dial(t, l, "127.0.0.1")
	<-accepted
	second := <-accepted
	third := dial(t, l, "127.0.0.1")
	if !closedSoon(third) {
		t.Fatal("a third connection from one peer was kept open")
	}
	dial(t, l, "127.0.0.2")
	select {
	case c := <-accepted:
		if got := ByIP(c).Bucket; got != "127.0.0.2" {
			t.Fatalf("accepted a connection from %s, want 127.0.0.2", got)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("another peer was not served")
	}
	second.Close()
	dial(t, l, "127.0.0.1")
	select {
	case <-accepted:
	case <-time.After(3 * time.Second):
		t.Fatal("the peer was not served again once one of its connections closed")
	}
}

// byFirstAddress serves 127.0.0.2 first, as ByIPAndLocalOwner serves the
// kubelet's root-owned probes.
func byFirstAddress(c net.Conn) Peer {
	p := ByIP(c)
	p.First = p.Bucket == "127.0.0.2"
	return p
}

// While every shared slot is held and connections wait for one, a First
// peer is served at once, and the waiting ones are served in arrival order
// as slots free. Before, every connection waited in the kernel's backlog
// behind all those queued before it: under a flood the kubelet's probes
// took up to 0.7 s of their 1 s.
func TestFairServesFirstAheadOfTheQueue(t *testing.T) {
	l, accepted := fairListener(t, Bounds{Serving: 2, First: 1, Waiting: 4, PerPeer: 1}, byFirstAddress)
	holders := []net.Conn{dial(t, l, "127.0.0.10"), dial(t, l, "127.0.0.11")}
	served := []net.Conn{<-accepted, <-accepted}
	for i := range 3 {
		dial(t, l, "127.0.0."+strconv.Itoa(20+i))
	}
	dial(t, l, "127.0.0.2")
	select {
	case c := <-accepted:
		if got := ByIP(c).Bucket; got != "127.0.0.2" {
			t.Fatalf("served %s while the shared slots were held, want the First peer", got)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the First peer waited behind the queue")
	}
	for i := range 3 {
		served[0].Close()
		select {
		case c := <-accepted:
			if got, want := ByIP(c).Bucket, "127.0.0."+strconv.Itoa(20+i); got != want {
				t.Fatalf("served %s, want %s (arrival order)", got, want)
			}
			served[0] = c
		case <-time.After(3 * time.Second):
			t.Fatalf("waiting connection %d not served once a slot freed", i)
		}
	}
	_ = holders
}

// Past Waiting, a connection is closed at once instead of queueing: the
// queue costs a descriptor each and is bounded.
func TestFairWaitingIsBounded(t *testing.T) {
	l, accepted := fairListener(t, Bounds{Serving: 1, Waiting: 2, PerPeer: 1}, ByIP)
	dial(t, l, "127.0.0.10")
	<-accepted
	waiting := []net.Conn{dial(t, l, "127.0.0.11"), dial(t, l, "127.0.0.12")}
	eventually(t, func() bool { return len(l.(*fair).waiting) == 2 })
	if !closedSoon(dial(t, l, "127.0.0.13")) {
		t.Fatal("a connection past the waiting bound was kept open")
	}
	for _, w := range waiting {
		if closedSoon(w) {
			t.Fatal("a waiting connection was closed")
		}
	}
}

// Close ends Accept, and closes what waits and what was about to be served.
func TestFairClose(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Fair(raw, Bounds{Serving: 1, Waiting: 4, PerPeer: 4}, ByIP)
	first := dial(t, l, "127.0.0.1")
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	queued := dial(t, l, "127.0.0.1")
	eventually(t, func() bool { return len(l.(*fair).waiting) == 1 })
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if !closedSoon(queued) {
		t.Fatal("a queued connection stayed open after Close")
	}
	_ = first
}

// fairListener is a Fair listener on loopback whose accepted connections
// arrive on the channel; all of it closes when t ends.
func fairListener(t *testing.T, b Bounds, classify Classify) (net.Listener, chan net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Fair(raw, b, classify)
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			accepted <- c
		}
	}()
	return l, accepted
}

// dial connects to l from the loopback address from.
func dial(t *testing.T, l net.Listener, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedSoon says whether the server closes c within a second.
func closedSoon(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := c.Read(make([]byte, 1))
	c.SetReadDeadline(time.Time{})
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 3 s")
		}
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
	want := Peer{Bucket: "127.0.0.1 uid " + strconv.Itoa(os.Geteuid()), First: os.Geteuid() == 0}
	if got := ByIPAndLocalOwner(s); got != want {
		t.Fatalf("peer = %+v, want %+v", got, want)
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
