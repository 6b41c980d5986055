package connlimit

import (
	"net"
	"path/filepath"
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
