package installer

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// TestTruncatedPrimaryStaysChosen: a primary caught mid-write by its CNI is
// not a reason to move to the next file. The installer stays with it, not
// ready and saying why, keeps our conflist as it was, and never touches
// 99-loopback.conf.
func TestTruncatedPrimaryStaysChosen(t *testing.T) {
	for _, startBroken := range []bool{false, true} {
		t.Run(map[bool]string{false: "broken while running", true: "broken at start"}[startBroken], func(t *testing.T) {
			e := newEnv(t)
			primary := filepath.Join(e.conf, "10-flannel.conflist")
			original := testdata(t, "10-flannel.conflist")
			truncated := original[:len(original)/2]
			loopback := filepath.Join(e.conf, "99-loopback.conf")
			loopbackData := []byte(`{"cniVersion": "1.0.0", "name": "lo", "type": "loopback"}`)
			writeTestFile(t, loopback, loopbackData, 0o644)
			writeTestFile(t, primary, original, 0o644)
			if startBroken {
				writeTestFile(t, primary, truncated, 0o644)
			}
			in := e.newInstaller(t, e.config(true))
			start(t, in)
			if !startBroken {
				waitFor(t, "installed", func() bool { return chainedFrom(t, primary, original) })
				writeTestFile(t, primary, truncated, 0o644)
			}
			files := []string{"10-flannel.conflist", "99-loopback.conf"}
			if !startBroken {
				files = append(files, "10-flannel-sluice.conflist")
			}
			waitFor(t, "not ready, naming the primary", notReadyBecause(in, "10-flannel.conflist"))
			in.sync()
			if !fileIs(loopback, loopbackData) {
				t.Fatal("99-loopback.conf was changed or removed")
			}
			assertOnly(t, e.conf, files...)
			if !fileIs(primary, truncated) {
				t.Fatal("the invalid primary was written")
			}
			if !startBroken && !fileIs(ownedConfFor(primary), mustInsert(t, original)) {
				t.Fatal("our conflist changed while the primary was invalid")
			}

			writeTestFile(t, primary, original, 0o644)
			waitFor(t, "installed once it parses", func() bool { return chainedFrom(t, primary, original) })
			waitFor(t, "ready", ready(in))
			if !fileIs(loopback, loopbackData) {
				t.Fatal("99-loopback.conf was changed or removed")
			}
		})
	}
}

// TestInvalidFileBeforePrimary: a file that sorts first but does not parse
// (a CNI being installed) freezes everything, our conflist stays as it is,
// and a conflist for the new file replaces it only once that file is valid.
func TestInvalidFileBeforePrimary(t *testing.T) {
	e := newEnv(t)
	old := filepath.Join(e.conf, "10-flannel.conflist")
	original := testdata(t, "10-flannel.conflist")
	writeTestFile(t, old, original, 0o644)
	in := e.newInstaller(t, e.config(true))
	start(t, in)
	waitFor(t, "installed", func() bool { return chainedFrom(t, old, original) })

	next := filepath.Join(e.conf, "05-cilium.conflist")
	cilium := testdata(t, "05-cilium.conflist")
	writeTestFile(t, next, cilium[:10], 0o644)
	waitFor(t, "not ready, naming the new file", notReadyBecause(in, "05-cilium.conflist"))
	in.sync()
	if !chainedFrom(t, old, original) {
		t.Fatal("our conflist for the old primary changed because of an invalid file")
	}
	writeTestFile(t, next, cilium, 0o644)
	waitFor(t, "chained from the new primary", func() bool {
		return chainedFrom(t, next, cilium) && fileIs(old, original) && !fileExists(ownedConfFor(old))
	})
	waitFor(t, "ready", ready(in))
}

// assertOnly fails unless dir holds exactly names (temp files included).
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	sort.Strings(names)
	if !slices.Equal(got, names) {
		t.Fatalf("%s holds %v, want %v", dir, got, names)
	}
}

// firstConf is the config a runtime would use: the lexically first.
func firstConf(t *testing.T, dir string) string {
	t.Helper()
	files, err := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	if err != nil || len(files) == 0 {
		t.Fatalf("no configs in %s: %v", dir, err)
	}
	sort.Strings(files)
	return filepath.Base(files[0])
}
