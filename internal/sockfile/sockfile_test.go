package sockfile

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "s.sock")
	l, err := Listen("unix", path, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	// A live socket is not taken over.
	if _, err := Listen("unix", path, 0o700); err == nil || !strings.Contains(err.Error(), "another agent") {
		t.Fatalf("second Listen on a live socket = %v", err)
	}
	// A dead one is replaced: close the listener underneath, which leaves
	// the file behind the way a killed process does.
	l.cur.Close()
	l, err = Listen("unix", path, 0o700)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l.Close()

	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("keep me"), 0o600)
	if _, err := Listen("unix", plain, 0o700); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep me" {
		t.Fatal("regular file changed")
	}
}

// Close removes the socket file while it is ours, and never a socket that
// took its place after ours was removed.
func TestCloseRemovesOnlyOurs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen("unix", path, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := os.Lstat(path); err == nil {
		t.Fatal("our socket left behind on Close")
	}
	l, err = Listen("unix", path, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	if ok, why := l.Ours(); ok || !strings.Contains(why, "not ours any more") {
		t.Fatalf("Ours() = %v %q once removed", ok, why)
	}
	other, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	l.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("Close removed another's socket: %v", err)
	}
}

// A removed socket file is listened on again at the path, with its mode;
// Accept goes on from the new socket, and a connection accepted before
// stays up.
func TestRestoreRemoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen("unix", path, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	before := dialEcho(t, path, accepted)
	if ok, err := l.Restore(); ok || err != nil {
		t.Fatalf("Restore() = %v %v with the socket in place", ok, err)
	}
	os.Remove(path)
	if ok, err := l.Restore(); !ok || err != nil {
		t.Fatalf("Restore() = %v %v with the socket removed", ok, err)
	}
	if ok, why := l.Ours(); !ok {
		t.Fatalf("Ours() = false (%s) once restored", why)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("restored socket: %v %v", fi, err)
	}
	if l.Restored() != 1 {
		t.Fatalf("Restored() = %d, want 1", l.Restored())
	}
	dialEcho(t, path, accepted)
	echo(t, before)
	l.Close()
	if _, err := os.Lstat(path); err == nil {
		t.Fatal("the restored socket left behind on Close")
	}
	if _, ok := <-accepted; ok {
		t.Fatal("Accept went on after Close")
	}
}

// A path that names anything else is never restored over, and never
// removed: another's socket, a dead socket, a regular file.
func TestRestoreLeavesOthersAlone(t *testing.T) {
	dir := t.TempDir()
	for name, put := range map[string]func(path string) func(){
		"live socket": func(path string) func() {
			o, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			return func() { o.Close() }
		},
		"dead socket": func(path string) func() {
			o, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			o.SetUnlinkOnClose(false)
			o.Close()
			return func() {}
		},
		"regular file": func(path string) func() {
			os.WriteFile(path, []byte("keep me"), 0o600)
			return func() {}
		},
	} {
		path := filepath.Join(dir, strings.Fields(name)[0]+".sock")
		l, err := Listen("unix", path, 0o700)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(path)
		defer put(path)()
		fi, _ := os.Lstat(path)
		if ok, err := l.Restore(); ok || err != nil {
			t.Errorf("%s: Restore() = %v %v", name, ok, err)
		}
		if ok, _ := l.Ours(); ok {
			t.Errorf("%s: Ours() = true", name)
		}
		l.Close()
		if after, err := os.Lstat(path); err != nil || !os.SameFile(fi, after) {
			t.Errorf("%s: the file at the path changed: %v", name, err)
		}
	}
}

// Keep restores within its interval and reports each restore; it stops
// with its context.
func TestKeep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen("unix", path, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(t.Context())
	reports := make(chan error, 4)
	done := make(chan struct{})
	go func() { l.Keep(ctx, 10*time.Millisecond, func(err error) { reports <- err }); close(done) }()
	os.Remove(path)
	select {
	case err := <-reports:
		if err != nil {
			t.Fatalf("Keep reported %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Keep did not restore the removed socket")
	}
	if ok, why := l.Ours(); !ok {
		t.Fatalf("Ours() = false (%s) after Keep restored", why)
	}
	cancel()
	<-done
}

// dialEcho connects to path and checks the listener's side of it answers.
func dialEcho(t *testing.T, path string, accepted <-chan net.Conn) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	select {
	case s := <-accepted:
		go func() { defer s.Close(); io.Copy(s, s) }()
	case <-time.After(5 * time.Second):
		t.Fatal("not accepted")
	}
	echo(t, c)
	return c
}

func echo(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q %v", buf, err)
	}
}
