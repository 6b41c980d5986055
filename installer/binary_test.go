package installer

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sluicemesh/sluice/installer/conflist"
)

func TestBinaryInstallAndSkip(t *testing.T) {
	e := newEnv(t)
	second := filepath.Join(t.TempDir(), "cni", "bin")
	cfg := e.config(false)
	cfg.BinDirs = append(cfg.BinDirs, second)
	in := e.newInstaller(t, cfg)
	in.sync()
	if ok, why := in.Ready(); !ok {
		t.Fatalf("not ready after sync: %s", why)
	}
	for _, dir := range cfg.BinDirs {
		target := filepath.Join(dir, conflist.PluginType)
		if !fileIs(target, readTestFile(t, e.src)) {
			t.Fatalf("%s is not the plugin binary", target)
		}
		if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s: mode %v, err %v", target, fi.Mode(), err)
		}
	}
	before := in.Stats().Writes
	in.sync()
	if after := in.Stats().Writes; after != before {
		t.Fatalf("second sync wrote %d files; content was already in place", after-before)
	}
	// A fresh installer (an agent restart) hashes what is there and also
	// leaves it alone.
	again := e.newInstaller(t, cfg)
	again.sync()
	if w := again.Stats().Writes; w != 0 {
		t.Fatalf("restarted installer rewrote %d files with equal content", w)
	}

	target := filepath.Join(e.bin, conflist.PluginType)
	if err := os.Chmod(target, 0o644); err != nil {
		t.Fatal(err)
	}
	in.sync()
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode not restored: %v", fi.Mode())
	}
}

// TestReplaceRunningBinary proves the install never writes into the inode a
// runtime may be executing: a long-running copy of the old plugin keeps
// running while a different binary is installed over it.
func TestReplaceRunningBinary(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(false)
	cfg.PluginBinary = copyFile(t, "/bin/sleep")
	e.newInstaller(t, cfg).sync()

	target := filepath.Join(e.bin, conflist.PluginType)
	old := exec.Command(target, "60")
	if err := old.Start(); err != nil {
		t.Fatalf("run old plugin: %v", err)
	}
	t.Cleanup(func() {
		_ = old.Process.Kill()
		_ = old.Wait()
	})
	// Writing into a running executable fails with ETXTBSY; this is the
	// failure an in-place copy would hit. (Some kernels allow the open, so
	// only report it.)
	if f, err := os.OpenFile(target, os.O_WRONLY, 0); err == nil {
		f.Close()
		t.Log("this kernel allows opening a running executable for writing")
	} else if !errors.Is(err, syscall.ETXTBSY) {
		t.Fatalf("open running binary: %v, want ETXTBSY", err)
	}

	cfg.PluginBinary = copyFile(t, "/bin/true")
	in := e.newInstaller(t, cfg)
	in.sync()
	if ok, why := in.Ready(); !ok {
		t.Fatalf("reinstall over running binary failed: %s", why)
	}
	if !fileIs(target, readTestFile(t, "/bin/true")) {
		t.Fatal("new binary not in place")
	}
	if err := old.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("old plugin process died: %v", err)
	}
	if out, err := exec.Command(target).CombinedOutput(); err != nil {
		t.Fatalf("new plugin does not run: %v %s", err, out)
	}
}

func TestStaleTempFilesRemoved(t *testing.T) {
	e := newEnv(t)
	stale := []string{
		filepath.Join(e.bin, tempPrefix+"sluice-123"+tempSuffix),
		filepath.Join(e.conf, tempPrefix+OwnConfName+"-456"+tempSuffix),
	}
	for _, p := range stale {
		writeTestFile(t, p, []byte("half"), 0o600)
	}
	foreign := filepath.Join(e.bin, ".other.tmp")
	writeTestFile(t, foreign, []byte("not ours"), 0o600)

	in := e.newInstaller(t, e.config(false))
	start(t, in)
	waitFor(t, "ready", func() bool { ok, _ := in.Ready(); return ok })
	for _, p := range stale {
		if fileExists(p) {
			t.Errorf("stale temp file %s left", p)
		}
	}
	if !fileExists(foreign) {
		t.Error("removed a temp file that is not ours")
	}
}

func copyFile(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	writeTestFile(t, dst, readTestFile(t, src), 0o755)
	return dst
}

// A same-size write into the installed binary, its mtime set back after:
// inode, size and mtime all match what was verified, but the content does
// not. The change time gives it away, and the content is compared again.
func TestSameSizeInPlaceChangeWithMtimeResetIsRestored(t *testing.T) {
	e := newEnv(t)
	in := e.newInstaller(t, e.config(false))
	in.sync()
	target := filepath.Join(e.bin, conflist.PluginType)
	orig := readTestFile(t, e.src)
	fi, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	evil := make([]byte, len(orig))
	copy(evil, "#!/bin/sh\nexit 0\n")
	if _, err := f.WriteAt(evil, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(target, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if now, err := os.Stat(target); err != nil || !os.SameFile(now, fi) || now.Size() != fi.Size() || !now.ModTime().Equal(fi.ModTime()) {
		t.Fatalf("the test's change is not the disguised one: %v", err)
	}
	in.sync()
	if !fileIs(target, orig) {
		t.Fatal("a same-size in-place change with its mtime reset was not restored")
	}
	if ok, why := in.Ready(); !ok {
		t.Fatalf("not ready after the restore: %s", why)
	}
}
