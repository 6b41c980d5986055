package installer

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// TestRewriteNeverTorn has a reader parse the conflist in a tight loop while
// two installers with different entries take turns rewriting it, 1,000
// real writes in all: the reader must never see a missing or broken file.
func TestRewriteNeverTorn(t *testing.T) {
	e := newEnv(t)
	primary := filepath.Join(e.conf, "10-flannel.conflist")
	writeTestFile(t, primary, testdata(t, "10-flannel.conflist"), 0o644)
	var ins [2]*Installer
	for i := range ins {
		cfg := e.config(true)
		cfg.ConfName = "10-flannel.conflist"
		cfg.PluginConfig = map[string]any{"socket": fmt.Sprintf("/run/sluice-%d.sock", i)}
		ins[i] = e.newInstaller(t, cfg)
	}

	var reads, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			data, err := os.ReadFile(primary)
			if err == nil {
				_, err = libcni.ConfListFromBytes(data)
			}
			reads.Add(1)
			if err != nil {
				failures.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
			}
		}
	})

	const rewrites = 1000
	for i := range rewrites {
		ins[i%2].sync()
	}
	close(stop)
	wg.Wait()

	writes := ins[0].Stats().Writes + ins[1].Stats().Writes
	// Each installer's first sync also installs the binary once (the
	// second finds it in place).
	if want := uint64(rewrites + 1); writes != want {
		t.Errorf("%d writes, want %d: every sync should have been a real write", writes, want)
	}
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d reads failed; first: %v", n, reads.Load(), firstFailure.Load())
	}
	if reads.Load() < rewrites {
		t.Fatalf("only %d reads during %d rewrites; the reader did not race the writer", reads.Load(), rewrites)
	}
	t.Logf("%d reads, no failures", reads.Load())
}

// TestChainedConfKeepsMode: our conflist for a single-plugin primary gets
// the primary's mode (a config may name credentials), and the .conf stays.
func TestChainedConfKeepsMode(t *testing.T) {
	e := newEnv(t)
	conf := filepath.Join(e.conf, "10-bridge.conf")
	writeTestFile(t, conf, testdata(t, "10-bridge.conf"), 0o640)
	in := e.newInstaller(t, e.config(true))
	in.sync()
	if ok, why := in.Ready(); !ok {
		t.Fatalf("not ready: %s", why)
	}
	if fi, err := os.Stat(filepath.Join(e.conf, "10-bridge-sluice.conflist")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("our conflist: %v (err %v), want the .conf's 0640", fi, err)
	}
	if !fileIs(conf, testdata(t, "10-bridge.conf")) {
		t.Fatal("the .conf changed")
	}
}
