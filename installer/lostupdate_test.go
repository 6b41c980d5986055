package installer

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// TestConcurrentRewriteNotReverted: the primary's CNI rewrites its file
// after the installer read it and before the rename of our conflist. The
// rewrite must survive, and ours must follow it, not publish a copy of the
// old bytes.
func TestConcurrentRewriteNotReverted(t *testing.T) {
	for _, how := range []string{"in place", "by rename"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			primary := filepath.Join(e.conf, "10-flannel.conflist")
			writeTestFile(t, primary, testdata(t, "10-flannel.conflist"), 0o644)
			rewritten := testdata(t, "10-calico.conflist")
			in := e.newInstaller(t, e.config(true))

			var injected atomic.Bool
			testHookBeforeRename = func(path string) {
				if filepath.Base(path) != filepath.Base(ownedConfFor(primary)) || !injected.CompareAndSwap(false, true) {
					return
				}
				if how == "in place" {
					writeTestFile(t, primary, rewritten, 0o644)
					return
				}
				tmp := filepath.Join(e.conf, "cni-writer.tmp")
				writeTestFile(t, tmp, rewritten, 0o644)
				if err := os.Rename(tmp, primary); err != nil {
					t.Error(err)
				}
			}
			t.Cleanup(func() { testHookBeforeRename = nil })

			in.sync()
			if !injected.Load() {
				t.Fatal("the installer never reached the rename")
			}
			if !chainedFrom(t, primary, rewritten) {
				t.Fatalf("the CNI's concurrent rewrite was lost or not followed:\n%s", readTestFile(t, ownedConfFor(primary)))
			}
			if ok, why := in.Ready(); !ok {
				t.Fatalf("not ready: %s", why)
			}
		})
	}
}
