package installer

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// firstHoldsSluice reports whether the config a runtime would use now (the
// lexically first) holds a sluice entry.
func firstHoldsSluice(t *testing.T, dir string) bool {
	t.Helper()
	return hasEntry(readTestFile(t, filepath.Join(dir, firstConf(t, dir))))
}

// TestPrimaryRewrittenWhileAway is a reboot: the primary's CNI writes its
// conflist again, from its own template (no sluice), while no installer
// runs, once in place and once after deleting it (a CNI that removes its
// file on shutdown). The config the runtime reads must still hold sluice,
// so an ADD meanwhile fails closed; the next installer follows the
// rewrite.
func TestPrimaryRewrittenWhileAway(t *testing.T) {
	for _, deleteFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "rewritten", true: "deleted, then written"}[deleteFirst], func(t *testing.T) {
			e := newEnv(t)
			primary := filepath.Join(e.conf, "10-calico.conflist")
			original := testdata(t, "10-calico.conflist")
			writeTestFile(t, primary, original, 0o644)
			e.newInstaller(t, e.config(true)).sync()
			for restart := range 3 {
				// The agent is away: its CNI rewrites the file with a change.
				rewritten := bytes.Replace(original, []byte(`"mtu": 0`), []byte(`"mtu": `+string(rune('1'+restart))), 1)
				if bytes.Equal(rewritten, original) {
					t.Fatal("the test's rewrite changed nothing")
				}
				if deleteFirst {
					if err := os.Remove(primary); err != nil {
						t.Fatal(err)
					}
					if !firstHoldsSluice(t, e.conf) {
						t.Fatalf("restart %d: with the primary deleted, the first config %s has no sluice", restart, firstConf(t, e.conf))
					}
				}
				if err := writeFile(primary, rewritten, 0o644); err != nil {
					t.Fatal(err)
				}
				if !firstHoldsSluice(t, e.conf) {
					t.Fatalf("restart %d: the runtime would use %s, which has no sluice: pods start uncaptured", restart, firstConf(t, e.conf))
				}
				// The agent is back.
				in := e.newInstaller(t, e.config(true))
				in.sync()
				if ok, why := in.Ready(); !ok || !chainedFrom(t, primary, rewritten) {
					t.Fatalf("restart %d: not following the rewrite: ready %v (%s)", restart, ok, why)
				}
			}
		})
	}
}

// TestFollowsPrimaryRewrite: with the installer running, a rewrite of the
// primary is followed within the repair budget. Ours kept sluice in the
// chain all along, so following it is no restore and readiness holds.
func TestFollowsPrimaryRewrite(t *testing.T) {
	e := newEnv(t)
	primary := filepath.Join(e.conf, "10-calico.conflist")
	original := testdata(t, "10-calico.conflist")
	writeTestFile(t, primary, original, 0o644)
	var r readiness
	cfg := e.config(true)
	cfg.OnChange = r.record
	in := e.newInstaller(t, cfg)
	start(t, in)
	waitFor(t, "installed", func() bool { return chainedFrom(t, primary, original) })
	waitFor(t, "ready", ready(in))

	changes := r.count()
	rewritten := bytes.Replace(original, []byte(`"mtu": 0`), []byte(`"mtu": 1450`), 1)
	if err := writeFile(primary, rewritten, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ours follows", func() bool { return chainedFrom(t, primary, rewritten) })
	if r.droppedSince(changes) {
		t.Error("readiness dropped while following the primary")
	}
	if n := in.Stats().Restores; n != 0 {
		t.Errorf("following the primary counted %d restores", n)
	}
}

// TestMigrationFromEntryInPrimary: an earlier version inserted the entry
// into the primary itself. Ours is written first, and only then is the
// entry taken out of the primary, so the first config always holds sluice.
func TestMigrationFromEntryInPrimary(t *testing.T) {
	e := newEnv(t)
	primary := filepath.Join(e.conf, "10-flannel.conflist")
	original := testdata(t, "10-flannel.conflist")
	writeTestFile(t, primary, mustInsert(t, original), 0o644)

	var primaryRenames int
	testHookBeforeRename = func(path string) {
		if filepath.Base(path) != filepath.Base(primary) {
			return
		}
		primaryRenames++
		if !fileIs(ownedConfFor(primary), mustInsert(t, original)) {
			t.Error("the entry was taken out of the primary before ours was in place")
		}
	}
	t.Cleanup(func() { testHookBeforeRename = nil })
	in := e.newInstaller(t, e.config(true))
	in.sync()
	if primaryRenames != 1 {
		t.Fatalf("the primary was renamed %d times, want once", primaryRenames)
	}
	if ok, why := in.Ready(); !ok || !chainedFrom(t, primary, original) {
		t.Fatalf("not migrated: ready %v (%s)\n%s", ok, why, readTestFile(t, primary))
	}
	assertOnly(t, e.conf, "10-flannel-sluice.conflist", "10-flannel.conflist")
}

// TestNewPrimarySortingFirst: a CNI's config appears that sorts before
// ours (05-cilium while ours is 10-calico-sluice). Ours for it is in place
// before the one for the old primary goes.
func TestNewPrimarySortingFirst(t *testing.T) {
	e := newEnv(t)
	old := filepath.Join(e.conf, "10-calico.conflist")
	writeTestFile(t, old, testdata(t, "10-calico.conflist"), 0o644)
	in := e.newInstaller(t, e.config(true))
	in.sync()

	next := filepath.Join(e.conf, "05-cilium.conflist")
	cilium := testdata(t, "05-cilium.conflist")
	var checked bool
	testHookBeforeRename = func(path string) {
		if filepath.Base(path) == filepath.Base(ownedConfFor(next)) {
			checked = true
			if !fileExists(ownedConfFor(old)) {
				t.Error("ours for the old primary went before ours for the new one was in place")
			}
		}
	}
	t.Cleanup(func() { testHookBeforeRename = nil })
	writeTestFile(t, next, cilium, 0o644)
	in.sync()
	if !checked {
		t.Fatal("ours for the new primary was never written")
	}
	if !chainedFrom(t, next, cilium) || fileExists(ownedConfFor(old)) {
		t.Fatal("not chained from the new primary alone")
	}
	if firstConf(t, e.conf) != "05-cilium-sluice.conflist" {
		t.Fatalf("the runtime would use %s", firstConf(t, e.conf))
	}
}

// TestPrimaryRenamedWhileAway: the primary's CNI writes its config under a
// new name (from its template, no sluice) and removes the old one while no
// installer runs. Ours for the old name still sorts first and holds
// sluice; the next installer moves to the new name.
func TestPrimaryRenamedWhileAway(t *testing.T) {
	e := newEnv(t)
	old := filepath.Join(e.conf, "10-calico.conflist")
	calico := testdata(t, "10-calico.conflist")
	writeTestFile(t, old, calico, 0o644)
	e.newInstaller(t, e.config(true)).sync()

	renamed := filepath.Join(e.conf, "11-calico.conflist")
	if err := writeFile(renamed, calico, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	if !firstHoldsSluice(t, e.conf) {
		t.Fatalf("the runtime would use %s, which has no sluice", firstConf(t, e.conf))
	}
	in := e.newInstaller(t, e.config(true))
	in.sync()
	if ok, why := in.Ready(); !ok || !chainedFrom(t, renamed, calico) {
		t.Fatalf("not chained from the renamed primary: ready %v (%s)", ok, why)
	}
	assertOnly(t, e.conf, "11-calico-sluice.conflist", "11-calico.conflist")
}

// TestOwnRemovesChainedConflist: after a switch from chained to non-chained
// mode (Multus) the chained run's conflist would sort first and keep sluice
// in the default network's chain, so it goes once YYY-sluice.conflist is in.
func TestOwnRemovesChainedConflist(t *testing.T) {
	e := newEnv(t)
	primary := filepath.Join(e.conf, "10-flannel.conflist")
	writeTestFile(t, primary, testdata(t, "10-flannel.conflist"), 0o644)
	e.newInstaller(t, e.config(true)).sync()
	if !fileExists(ownedConfFor(primary)) {
		t.Fatal("chained run wrote no conflist")
	}
	in := e.newInstaller(t, e.config(false))
	in.sync()
	if ok, why := in.Ready(); !ok {
		t.Fatalf("not ready: %s", why)
	}
	assertOnly(t, e.conf, "10-flannel.conflist", OwnConfName)
	if !fileIs(primary, testdata(t, "10-flannel.conflist")) {
		t.Error("the primary changed")
	}
}

// TestUninstallDropsEarlierEntry: an entry an earlier version inserted into
// the primary goes with uninstall, the rest of the file byte for byte.
func TestUninstallDropsEarlierEntry(t *testing.T) {
	e := newEnv(t)
	primary := filepath.Join(e.conf, "10-calico.conflist")
	original := testdata(t, "10-calico.conflist")
	writeTestFile(t, primary, mustInsert(t, original), 0o644)
	if err := e.newInstaller(t, e.config(true)).Uninstall(); err != nil {
		t.Fatal(err)
	}
	assertOnly(t, e.conf, "10-calico.conflist")
	if !fileIs(primary, original) {
		t.Fatalf("the earlier version's entry is left:\n%s", readTestFile(t, primary))
	}
}

// TestChainedRemovesOwnConflist: after a switch from non-chained to chained
// mode the old 00-sluice.conflist would sort first and hand every pod to
// sluice alone, so it goes.
func TestChainedRemovesOwnConflist(t *testing.T) {
	e := newEnv(t)
	e.newInstaller(t, e.config(false)).sync()
	primary := filepath.Join(e.conf, "10-flannel.conflist")
	writeTestFile(t, primary, testdata(t, "10-flannel.conflist"), 0o644)

	in := e.newInstaller(t, e.config(true))
	in.sync()
	if ok, why := in.Ready(); !ok {
		t.Fatalf("not ready: %s", why)
	}
	if fileExists(filepath.Join(e.conf, OwnConfName)) {
		t.Error("non-chained conflist left in place")
	}
	if !chainedFrom(t, primary, testdata(t, "10-flannel.conflist")) {
		t.Error("not chained from the primary")
	}
}
