package installer

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// withIstioCNI is 10-flannel.conflist as istio-cni's installer leaves it:
// its entry appended last.
func withIstioCNI(t *testing.T) []byte {
	t.Helper()
	flannel := testdata(t, "10-flannel.conflist")
	i := bytes.LastIndex(flannel, []byte("\n  ]"))
	entry := `,
    {
      "type": "istio-cni",
      "log_level": "info",
      "kubernetes": {"kubeconfig": "/etc/cni/net.d/ZZZ-istio-cni-kubeconfig", "cni_bin_dir": "/opt/cni/bin"}
    }`
	return append(append(append([]byte{}, flannel[:i]...), entry...), flannel[i:]...)
}

// TestLeftoverIstioCNIEntry: an istio-cni entry left in the primary after a
// migration is reported and kept by default, and removed, byte-preserving,
// from ours and from the primary when the operator asks for it.
func TestLeftoverIstioCNIEntry(t *testing.T) {
	t.Run("warn", func(t *testing.T) {
		e := newEnv(t)
		primary := filepath.Join(e.conf, "10-flannel.conflist")
		list := withIstioCNI(t)
		writeTestFile(t, primary, list, 0o644)
		in := e.newInstaller(t, e.config(true))
		in.sync()
		in.sync()
		if !chainedFrom(t, primary, list) {
			t.Fatalf("want the istio-cni entry kept and ours last:\n%s", readTestFile(t, ownedConfFor(primary)))
		}
		if n := strings.Count(e.logs.String(), "--remove-istio-cni-entry"); n != 1 {
			t.Errorf("the istio-cni warning was logged %d times, want once:\n%s", n, e.logs.String())
		}
	})
	t.Run("remove", func(t *testing.T) {
		e := newEnv(t)
		primary := filepath.Join(e.conf, "10-flannel.conflist")
		writeTestFile(t, primary, withIstioCNI(t), 0o644)
		cfg := e.config(true)
		cfg.RemoveIstioCNIEntry = true
		in := e.newInstaller(t, cfg)
		in.sync()
		flannel := testdata(t, "10-flannel.conflist")
		if !chainedFrom(t, primary, flannel) {
			t.Fatalf("want flannel's bytes exactly in the primary, and with our entry in ours:\n%s", readTestFile(t, ownedConfFor(primary)))
		}
		if err := in.Uninstall(); err != nil {
			t.Fatal(err)
		}
		if !fileIs(primary, flannel) {
			t.Fatalf("after uninstall want flannel's file without either entry:\n%s", readTestFile(t, primary))
		}
	})
}
