package installer

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/installer/conflist"
)

// TestSymlinkedPrimaryRefused: a linked conflist is managed somewhere else
// (config management, an image path). The installer neither replaces the
// link with a regular file nor writes through it; it says so, not ready.
func TestSymlinkedPrimaryRefused(t *testing.T) {
	e := newEnv(t)
	managed := filepath.Join(t.TempDir(), "flannel.conflist")
	original := testdata(t, "10-flannel.conflist")
	writeTestFile(t, managed, original, 0o644)
	link := filepath.Join(e.conf, "10-flannel.conflist")
	if err := os.Symlink(managed, link); err != nil {
		t.Fatal(err)
	}
	in := e.newInstaller(t, e.config(true))
	in.sync()
	if ok, why := in.Ready(); ok || !strings.Contains(why, "symbolic link") || !strings.Contains(why, managed) {
		t.Fatalf("ready=%v %q, want not ready naming the link and its target", ok, why)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode().Type() != os.ModeSymlink {
		t.Fatalf("the link was replaced: %v %v", fi, err)
	}
	if !fileIs(managed, original) {
		t.Fatal("the link's target was written")
	}
}

// TestOversizePrimaryRefused: a config over the cap is never read whole
// (a 200 MB file cost 1.5 GB per resync); not ready, the file named.
func TestOversizePrimaryRefused(t *testing.T) {
	e := newEnv(t)
	primary := filepath.Join(e.conf, "10-flannel.conflist")
	original := testdata(t, "10-flannel.conflist")
	// Valid JSON, only huge: padding inside the first plugin.
	huge := bytes.Replace(original, []byte(`"type": "flannel",`),
		[]byte(`"type": "flannel", "pad": "`+strings.Repeat("x", maxConfSize)+`",`), 1)
	writeTestFile(t, primary, huge, 0o644)
	in := e.newInstaller(t, e.config(true))
	in.sync()
	if ok, why := in.Ready(); ok || !strings.Contains(why, "10-flannel.conflist") || !strings.Contains(why, "larger than") {
		t.Fatalf("ready=%v %q, want not ready naming the file and the cap", ok, why)
	}
	if !fileIs(primary, huge) {
		t.Fatal("the oversize primary was written")
	}
}

// TestFIFOsNeverBlock: a FIFO where a config or the binary should be (or
// sorting first) is never opened for a blocking read.
func TestFIFOsNeverBlock(t *testing.T) {
	e := newEnv(t)
	primary := filepath.Join(e.conf, "10-flannel.conflist")
	writeTestFile(t, primary, testdata(t, "10-flannel.conflist"), 0o644)
	for _, p := range []string{
		filepath.Join(e.conf, "05-trap.conflist"),
		filepath.Join(e.bin, conflist.PluginType),
	} {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	in := e.newInstaller(t, e.config(true))
	done := make(chan struct{})
	go func() { in.sync(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a hang, not a slow pass
		// Unblock the reader so the test can end.
		for _, p := range []string{filepath.Join(e.conf, "05-trap.conflist"), filepath.Join(e.bin, conflist.PluginType)} {
			if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		}
		t.Fatal("sync blocked on a FIFO")
	}
	if ok, why := in.Ready(); ok || !strings.Contains(why, "05-trap.conflist") || !strings.Contains(why, "not a regular file") {
		t.Fatalf("ready=%v %q, want not ready naming the FIFO", ok, why)
	}
	if !fileIs(filepath.Join(e.bin, conflist.PluginType), readTestFile(t, e.src)) {
		t.Error("the FIFO in place of the binary was not replaced")
	}
	if fi, err := os.Lstat(filepath.Join(e.conf, "05-trap.conflist")); err != nil || fi.Mode().Type() != os.ModeNamedPipe {
		t.Error("the FIFO in the conf dir was touched")
	}
}
