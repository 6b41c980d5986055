package sockfile

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	l.UnixListener.Close()
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
