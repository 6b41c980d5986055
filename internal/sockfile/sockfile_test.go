package sockfile

import (
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
	// A dead one is replaced. UnixListener.Close removes the file, so
	// leave a stale socket behind the way a killed process does.
	l.SetUnlinkOnClose(false)
	l.Close()
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
