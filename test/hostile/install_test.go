package hostile

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// installing starts n's agent with its installer on: a conf dir holding a
// primary conflist and a bin dir, both the test's own.
func (n *node) installing(t *testing.T) (conf, bin string) {
	t.Helper()
	conf, bin = filepath.Join(n.Dir, "net.d"), filepath.Join(n.Dir, "bin")
	for _, d := range []string{conf, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	primary, err := os.ReadFile("../../installer/conflist/testdata/primary/10-flannel.conflist")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "10-flannel.conflist"), primary, 0o644); err != nil {
		t.Fatal(err)
	}
	n.start(true, "--install=true", "--cni-conf-dir", conf, "--cni-bin-dir", bin,
		"--plugin-binary", filepath.Join(binDir, "sluice"), "--resync-interval", "1s")
	return conf, bin
}

// exchange swaps two paths atomically (renameat2 RENAME_EXCHANGE).
func exchange(t *testing.T, a, b string) {
	t.Helper()
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("exchange %s and %s: %v", a, b, err)
	}
}

// dirBytes is every file of dir with its content.
func dirBytes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

func sameDir(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// The conf dir swapped for a link to another CNI's conf dir: the installer
// edits nothing there and goes not ready saying why; the real directory
// back, it is ready again with its conflist in the real directory, and
// the other directory is as it was.
func TestConfDirSwappedForALink(t *testing.T) {
	n := newNode(t)
	conf, _ := n.installing(t)
	victim := nstest.NewIn(t, n.Root, "victim")
	if e, _ := n.run(call{verb: "ADD", id: "victim", netns: victim.Path}); e != nil {
		t.Fatal(e)
	}
	before := ruleset(t, victim)
	withEntry, err := os.ReadFile(filepath.Join(conf, "10-flannel-sluice.conflist"))
	if err != nil || !bytes.Contains(withEntry, []byte(`"sluice"`)) {
		t.Fatalf("no sluice entry installed: %v\n%s", err, withEntry)
	}

	other := filepath.Join(n.Dir, "other-cni")
	os.MkdirAll(other, 0o755)
	calico, err := os.ReadFile("../../installer/conflist/testdata/primary/10-calico.conflist")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(other, "10-calico.conflist"), calico, 0o644)
	untouched := dirBytes(t, other)
	link := filepath.Join(n.Dir, "net.d-link")
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	exchange(t, conf, link) // conf is the link now; the real dir is at link
	nstest.Eventually(t, 10*time.Second, func() bool {
		code, body := n.get("/readyz")
		return code == 503 && strings.Contains(body, "symbolic link")
	}, "the installer never refused the linked conf dir")
	if got := dirBytes(t, other); !sameDir(got, untouched) {
		t.Fatalf("the installer wrote through the link: %v", got)
	}

	exchange(t, conf, link) // the real directory is back
	nstest.Eventually(t, 10*time.Second, func() bool { code, _ := n.get("/readyz"); return code == 200 },
		"not ready again with the real conf dir back")
	if got := dirBytes(t, other); !sameDir(got, untouched) {
		t.Fatalf("the other directory was left edited: %v", got)
	}
	n.stillServes(t, victim, before)
}

// The installed plugin changed in place, same size, its mtime set back:
// the installer restores the agent's binary.
func TestInstalledPluginChangedInPlace(t *testing.T) {
	n := newNode(t)
	_, bin := n.installing(t)
	victim := nstest.NewIn(t, n.Root, "victim")
	if e, _ := n.run(call{verb: "ADD", id: "victim", netns: victim.Path}); e != nil {
		t.Fatal(e)
	}
	before := ruleset(t, victim)
	installed := filepath.Join(bin, "sluice")
	want, err := os.ReadFile(filepath.Join(binDir, "sluice"))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(installed)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(installed, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("#!/bin/sh\nexit 0\n"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(installed, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 10*time.Second, func() bool {
		got, err := os.ReadFile(installed)
		return err == nil && bytes.Equal(got, want)
	}, "the plugin binary changed in place was never restored")
	n.stillServes(t, victim, before)
}

// agentServingNoUID starts a second agent whose --allowed-uids lacks 0 (the
// runtime's uid): it would serve no ADD while /healthz is green, so it is
// refused at start, in one line, and by --check-config.
func agentServingNoUID(t *testing.T, n *node) {
	for _, uids := range []string{"", "1000"} {
		check := exec.Command(filepath.Join(binDir, "sluice-agent"), "--check-config", "--allowed-uids", uids)
		out, err := check.CombinedOutput()
		if code := check.ProcessState.ExitCode(); err == nil || code != 2 || !strings.Contains(string(out), "--allowed-uids") {
			t.Fatalf("--check-config --allowed-uids %q: exit %d\n%s", uids, code, out)
		}
	}
	second := *n
	second.Socket = filepath.Join(filepath.Dir(n.Socket), "nouid.sock")
	second.StateDir = filepath.Join(n.Dir, "state-nouid")
	b := second.start(false, "--allowed-uids", "1000", "--health-addr", "127.0.0.1:9893")
	select {
	case <-b.Done:
	case <-time.After(10 * time.Second):
		t.Fatalf("an agent serving no uid kept running:\n%s", b.Logs)
	}
	if b.Cmd.ProcessState.Success() || !strings.Contains(b.Logs.String(), "must include uid 0") {
		t.Fatalf("agent with --allowed-uids 1000: %v\n%s", b.Cmd.ProcessState, b.Logs)
	}
}
