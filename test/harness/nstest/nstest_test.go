package nstest

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestVethCarriesTCP(t *testing.T) {
	a, b := New(t, "a"), New(t, "b")
	Veth(t, a, "eth0", []string{"10.250.0.1/24", "fd00:250::1/64"}, b, "eth0", []string{"10.250.0.2/24", "fd00:250::2/64"})

	lc := make(chan net.Listener, 1)
	b.Go(t, func() {
		l, err := net.Listen("tcp", "[::]:8080")
		if err != nil {
			t.Error(err)
			close(lc)
			return
		}
		lc <- l
	})
	l := <-lc
	if l == nil {
		t.FailNow()
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	for _, dst := range []string{"10.250.0.2:8080", "[fd00:250::2]:8080"} {
		err := a.Do(func() error {
			c, err := net.DialTimeout("tcp", dst, 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			buf := make([]byte, 2)
			_, err = c.Read(buf)
			return err
		})
		if err != nil {
			t.Errorf("dial %s from a: %v", dst, err)
		}
	}
	if out := a.Run(t, "ip", "-o", "link"); !strings.Contains(out, "eth0") {
		t.Errorf("ip link in a: %s", out)
	}
}
