package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var opts = Options{TempPattern: ".t-*", Perm: 0o640}

func TestWriteReplacesWithMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077) // the mode is set explicitly, whatever the umask
	defer syscall.Umask(old)
	if err := Write(path, Bytes([]byte("new")), opts); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	fi, _ := os.Stat(path)
	if string(b) != "new" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("got %q mode %v, want \"new\" mode 0640", b, fi.Mode().Perm())
	}
	assertOnly(t, dir, "f")
}

// A write that fails at any step leaves the old file as it was and no temp
// file behind.
func TestFailedWriteKeepsOldFile(t *testing.T) {
	boom := errors.New("boom")
	for name, o := range map[string]struct {
		fill   func(io.Writer) error
		before func() error
	}{
		"fill":         {fill: func(io.Writer) error { return boom }},
		"BeforeRename": {fill: Bytes([]byte("new")), before: func() error { return boom }},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			os.WriteFile(path, []byte("old"), 0o600)
			err := Write(path, o.fill, Options{TempPattern: ".t-*", Perm: 0o600, BeforeRename: o.before})
			if !errors.Is(err, boom) {
				t.Fatalf("err = %v, want boom", err)
			}
			if b, _ := os.ReadFile(path); string(b) != "old" {
				t.Fatalf("file = %q after a failed write, want old", b)
			}
			assertOnly(t, dir, "f")
		})
	}
}

// BeforeRename runs once the temp file is complete and before path
// changes: the installer's last re-check of a file someone else owns.
func TestBeforeRenameSeesOldFileAndCompleteTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	os.WriteFile(path, []byte("old"), 0o600)
	var seen, temp string
	err := Write(path, Bytes([]byte("new")), Options{TempPattern: ".t-*", Perm: 0o600, BeforeRename: func() error {
		b, _ := os.ReadFile(path)
		seen = string(b)
		ms, _ := filepath.Glob(filepath.Join(dir, ".t-*"))
		if len(ms) == 1 {
			b, _ = os.ReadFile(ms[0])
			temp = string(b)
		}
		return nil
	}})
	if err != nil || seen != "old" || temp != "new" {
		t.Fatalf("err %v; BeforeRename saw path %q and temp %q, want old and new", err, seen, temp)
	}
}

// A missing directory is reported as fs.ErrNotExist, so the journal can
// recreate its state dir and write again.
func TestMissingDirIsErrNotExist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone", "f")
	err := Write(path, Bytes(nil), opts)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want ErrNotExist naming %s", err, path)
	}
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "gone")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SyncDir of a missing dir: %v, want ErrNotExist", err)
	}
}

// A FIFO or a file where the directory should be fails at once: os.Open
// of a FIFO would wait for a writer forever, and a file is not the
// directory whose entries need the fsync.
func TestSyncDirRefusesNonDirectories(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, file} {
		done := make(chan error, 1)
		go func() { done <- SyncDir(p) }()
		select {
		case err := <-done:
			if !errors.Is(err, syscall.ENOTDIR) || !strings.Contains(err.Error(), p) {
				t.Errorf("SyncDir(%s) = %v, want ENOTDIR naming it", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("SyncDir(%s) still blocked after 5s", p)
		}
	}
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("dir holds %v, want %v", got, names)
	}
}
