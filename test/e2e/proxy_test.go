package e2e

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/origdst"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// proxy stands in for Envoy: it listens in the pod netns and reports each
// connection's original destination.
type proxy struct {
	conns chan netip.AddrPort
}

// listenIn listens on port, every address of both families, inside pod,
// until the test ends; what names the listener in a failure.
func listenIn(t *testing.T, pod *nstest.NS, port, what string) net.Listener {
	t.Helper()
	lc := make(chan net.Listener, 1)
	pod.Go(t, func() {
		l, err := net.Listen("tcp", "[::]:"+port)
		if err != nil {
			t.Errorf("%s listen in %s: %v", what, pod.Name, err)
		}
		lc <- l
	})
	l := <-lc
	if l == nil {
		t.FailNow()
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func startProxy(t *testing.T, pod *nstest.NS, port string) *proxy {
	t.Helper()
	p := &proxy{conns: make(chan netip.AddrPort, 16)}
	l := listenIn(t, pod, port, "proxy")
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			dst, err := origdst.Get(c.(*net.TCPConn))
			if err != nil {
				t.Errorf("original dst: %v", err)
			}
			c.Write([]byte("proxied\n"))
			c.Close()
			p.conns <- dst
		}
	}()
	return p
}

// expect waits for one connection and checks its original destination.
func (p *proxy) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-p.conns:
		if got.String() != want {
			t.Fatalf("proxy saw original dst %s, want %s", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no connection reached the proxy (want original dst %s)", want)
	}
}

// dialFrom connects from inside ns and reads the first line.
func dialFrom(t *testing.T, ns *nstest.NS, addr string) (string, error) {
	t.Helper()
	c, err := ns.Dial("tcp", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}
