package origdst

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"golang.org/x/sys/unix"
)

// TestGet redirects local connections in a fresh netns (via the nft CLI,
// which tests may use) to a listener and reads back where they were headed.
func TestGet(t *testing.T) {
	ns := nstest.New(t, "origdst")
	ns.Run(t, "nft", "add table inet t; add chain inet t out { type nat hook output priority -100; }; add rule inet t out tcp dport 80 redirect to :15001")
	var l *net.TCPListener
	if err := ns.Do(func() error {
		ln, err := net.Listen("tcp", "[::]:15001")
		l, _ = ln.(*net.TCPListener)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	for _, dst := range []string{"192.0.2.7:80", "[2001:db8::7]:80", "127.0.0.1:15001"} {
		want := netip.MustParseAddrPort(dst)
		// Routes to the documentation prefixes so the dial leaves through
		// the output hook at all.
		ns.Run(t, "ip", "route", "replace", "local", want.Addr().String(), "dev", "lo")
		errc := make(chan error, 1)
		go func() {
			errc <- ns.Do(func() error {
				c, err := net.DialTimeout("tcp", dst, 2*time.Second)
				if err == nil {
					c.Close()
				}
				return err
			})
		}()
		l.SetDeadline(time.Now().Add(3 * time.Second))
		c, err := l.AcceptTCP()
		if err != nil {
			t.Fatalf("accept for %s: %v", dst, err)
		}
		got, err := Get(c)
		c.Close()
		if err := <-errc; err != nil {
			t.Fatalf("dial %s: %v", dst, err)
		}
		// The last, direct connection is tracked but not NATed: its
		// original destination is the one it dialled.
		if err != nil || got != want {
			t.Errorf("Get for %s: %v, %v", dst, got, err)
		}
	}
}

func TestGetUntracked(t *testing.T) {
	ns := nstest.New(t, "origdst")
	err := ns.Do(func() error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer l.Close()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		s, err := l.Accept()
		if err != nil {
			return err
		}
		defer s.Close()
		// No nat table in this netns, so conntrack never saw it.
		if got, err := Get(s.(*net.TCPConn)); !errors.Is(err, unix.ENOENT) {
			t.Errorf("Get on an untracked connection: %v, %v; want ENOENT", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
