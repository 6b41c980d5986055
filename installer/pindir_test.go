package installer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/installer/conflist"
)

// elsewhere is another directory with another CNI's config in it, which
// the installer must never write: what a swapped-in link points at.
func elsewhere(t *testing.T) (dir string, snapshot func() map[string]string) {
	t.Helper()
	dir = t.TempDir()
	writeTestFile(t, filepath.Join(dir, "05-other.conflist"), testdata(t, "10-calico.conflist"), 0o644)
	return dir, func() map[string]string {
		out := map[string]string{}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			out[e.Name()] = string(readTestFile(t, filepath.Join(dir, e.Name())))
		}
		return out
	}
}

// swapForLink moves dir aside and puts a symbolic link to target in its
// place; the returned func puts the directory back.
func swapForLink(t *testing.T, dir, target string) func() {
	t.Helper()
	aside := dir + ".real"
	if err := os.Rename(dir, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, dir); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(aside, dir); err != nil {
			t.Fatal(err)
		}
	}
}

func sameFiles(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A conf dir briefly replaced by a link to another directory: the
// installer writes nothing there, says why it is not ready, and puts its
// entry back in the real directory once it returns.
func TestConfDirSwappedForALinkIsNeverWrittenThrough(t *testing.T) {
	e := newEnv(t)
	primary := filepath.Join(e.conf, "10-flannel.conflist")
	writeTestFile(t, primary, testdata(t, "10-flannel.conflist"), 0o644)
	in := e.newInstaller(t, e.config(true))
	in.sync()
	if ok, why := in.Ready(); !ok {
		t.Fatalf("not ready before the swap: %s", why)
	}
	other, files := elsewhere(t)
	before := files()

	back := swapForLink(t, e.conf, other)
	in.sync()
	if got := files(); !sameFiles(got, before) {
		t.Fatalf("the installer wrote through the link into %s: %v", other, got)
	}
	if ok, why := in.Ready(); ok || !strings.Contains(why, "symbolic link") {
		t.Fatalf("ready %v (%q) while the conf dir is a link", ok, why)
	}

	back()
	if err := os.Remove(ownedConfFor(primary)); err != nil { // our conflist gone meanwhile
		t.Fatal(err)
	}
	in.sync()
	if ok, why := in.Ready(); !ok || !chainedFrom(t, primary, testdata(t, "10-flannel.conflist")) {
		t.Fatalf("after the directory returned: ready %v (%s)", ok, why)
	}
	if got := files(); !sameFiles(got, before) {
		t.Fatalf("the other directory was left edited: %v", got)
	}
}

// The swap lands in the middle of a write, between the read and the
// rename: the rename still goes into the directory that was read.
func TestConfDirSwappedDuringAWriteKeepsTheWriteInside(t *testing.T) {
	e := newEnv(t)
	primary := filepath.Join(e.conf, "10-flannel.conflist")
	writeTestFile(t, primary, testdata(t, "10-flannel.conflist"), 0o644)
	other, files := elsewhere(t)
	// The same name on the other side: a rename through the link would
	// replace it.
	writeTestFile(t, filepath.Join(other, "10-flannel-sluice.conflist"), testdata(t, "10-calico.conflist"), 0o644)
	before := files()
	in := e.newInstaller(t, e.config(true))
	in.sync()
	if err := os.Remove(ownedConfFor(primary)); err != nil { // our conflist gone
		t.Fatal(err)
	}
	var back func()
	testHookBeforeRename = func(string) {
		if back == nil {
			back = swapForLink(t, e.conf, other)
		}
	}
	t.Cleanup(func() { testHookBeforeRename = nil })
	in.sync()
	if back == nil {
		t.Fatal("the installer never reached the rename")
	}
	if got := files(); !sameFiles(got, before) {
		t.Fatalf("the rename went through the link into %s: %v", other, got)
	}
	back()
	if !chainedFrom(t, primary, testdata(t, "10-flannel.conflist")) {
		t.Fatal("the write did not land in the real directory")
	}
}

// The bin dir is pinned the same way: no plugin binary is put through a
// link into another directory.
func TestBinDirSwappedForALinkIsNeverWrittenThrough(t *testing.T) {
	e := newEnv(t)
	writeTestFile(t, filepath.Join(e.conf, "10-flannel.conflist"), testdata(t, "10-flannel.conflist"), 0o644)
	in := e.newInstaller(t, e.config(true))
	in.sync()
	other := t.TempDir()
	back := swapForLink(t, e.bin, other)
	in.sync()
	if _, err := os.Lstat(filepath.Join(other, conflist.PluginType)); err == nil {
		t.Fatal("the plugin binary was written through the link")
	}
	if ok, why := in.Ready(); ok || !strings.Contains(why, "symbolic link") {
		t.Fatalf("ready %v (%q) while the bin dir is a link", ok, why)
	}
	back()
	in.sync()
	if ok, why := in.Ready(); !ok {
		t.Fatalf("after the directory returned: %s", why)
	}
}

// A real directory put in place of the old one (net.d recreated) is where
// the installer works from then on.
func TestRecreatedConfDirIsFollowed(t *testing.T) {
	e := newEnv(t)
	writeTestFile(t, filepath.Join(e.conf, "10-flannel.conflist"), testdata(t, "10-flannel.conflist"), 0o644)
	in := e.newInstaller(t, e.config(true))
	in.sync()
	if err := os.RemoveAll(e.conf); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.conf, 0o755); err != nil {
		t.Fatal(err)
	}
	primary := filepath.Join(e.conf, "10-calico.conflist")
	writeTestFile(t, primary, testdata(t, "10-calico.conflist"), 0o644)
	in.sync()
	if ok, why := in.Ready(); !ok || !chainedFrom(t, primary, testdata(t, "10-calico.conflist")) {
		t.Fatalf("recreated conf dir: ready %v (%s)", ok, why)
	}
	if st := in.Stats(); strings.Contains(st.LastRestore.Path, "/proc/self/fd") {
		t.Fatalf("a restore is reported by its pinned path: %+v", st.LastRestore)
	}
}
