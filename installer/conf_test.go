package installer

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/installer/conflist"
)

// TestConfPrimaryNeverConverted: a single-plugin .conf is another CNI's
// file. The installer chains into it by writing a conflist of its own that
// sorts just before it, and leaves the .conf byte for byte as it was,
// through rewrites and uninstall.
func TestConfPrimaryNeverConverted(t *testing.T) {
	e := newEnv(t)
	conf := filepath.Join(e.conf, "10-bridge.conf")
	original := testdata(t, "10-bridge.conf")
	writeTestFile(t, conf, original, 0o644)
	ours := filepath.Join(e.conf, "10-bridge-sluice.conflist")
	in := e.newInstaller(t, e.config(true))
	start(t, in)
	waitFor(t, "own conflist chained from the .conf", func() bool { return fileIs(ours, mustInsert(t, mustFromConf(t, original))) })
	waitFor(t, "ready", ready(in))
	if !fileIs(conf, original) {
		t.Fatal("the .conf was changed")
	}
	if first := firstConf(t, e.conf); first != filepath.Base(ours) {
		t.Fatalf("runtimes would use %s, not our conflist", first)
	}

	// Its CNI rewrites the .conf: our conflist follows.
	rewritten := bytes.Replace(original, []byte("10.22.0.0/16"), []byte("10.23.0.0/16"), 1)
	if err := writeFile(conf, rewritten, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "own conflist follows the .conf", func() bool { return fileIs(ours, mustInsert(t, mustFromConf(t, rewritten))) })

	// Half-written: our conflist stays as it was, not ready.
	writeTestFile(t, conf, rewritten[:20], 0o644)
	waitFor(t, "not ready", notReadyBecause(in, "10-bridge.conf"))
	in.sync()
	if !fileIs(ours, mustInsert(t, mustFromConf(t, rewritten))) {
		t.Fatal("our conflist changed while the .conf was invalid")
	}
	writeTestFile(t, conf, rewritten, 0o644)
	waitFor(t, "ready again", ready(in))

	if err := in.Uninstall(); err != nil {
		t.Fatal(err)
	}
	assertOnly(t, e.conf, "10-bridge.conf")
	if !fileIs(conf, rewritten) {
		t.Fatal("uninstall changed the .conf")
	}
}

// TestConfPrimaryDeleted: with no primary left our conflist stays, so new
// pods fail closed rather than start through a file its CNI writes again
// before the agent reacts; not ready, saying so. It goes once another
// config is the primary and ours for it is in place.
func TestConfPrimaryDeleted(t *testing.T) {
	e := newEnv(t)
	conf := filepath.Join(e.conf, "10-bridge.conf")
	writeTestFile(t, conf, testdata(t, "10-bridge.conf"), 0o644)
	in := e.newInstaller(t, e.config(true))
	start(t, in)
	waitFor(t, "ready", ready(in))
	ours := filepath.Join(e.conf, "10-bridge-sluice.conflist")
	kept := readTestFile(t, ours)
	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "not ready, keeping our conflist", notReadyBecause(in, "keeping"))
	in.sync()
	assertOnly(t, e.conf, "10-bridge-sluice.conflist")
	if !fileIs(ours, kept) {
		t.Fatal("our conflist changed while no primary exists")
	}

	calico := filepath.Join(e.conf, "10-calico.conflist")
	writeTestFile(t, calico, testdata(t, "10-calico.conflist"), 0o644)
	waitFor(t, "chained from the new primary, the old conflist gone", func() bool {
		return chainedFrom(t, calico, testdata(t, "10-calico.conflist")) && !fileExists(ours)
	})
	waitFor(t, "ready", ready(in))
}

// TestConfTargetWithoutEntryReplaced: a file at our conflist's name sorts
// just before the primary, so one without a sluice entry (ours stripped by
// hand, or anyone's) would start pods uncaptured: it is replaced.
func TestConfTargetWithoutEntryReplaced(t *testing.T) {
	e := newEnv(t)
	writeTestFile(t, filepath.Join(e.conf, "10-bridge.conf"), testdata(t, "10-bridge.conf"), 0o644)
	theirs := filepath.Join(e.conf, "10-bridge-sluice.conflist")
	writeTestFile(t, theirs, testdata(t, "11-bridge.conflist"), 0o644)
	in := e.newInstaller(t, e.config(true))
	in.sync()
	if ok, why := in.Ready(); !ok {
		t.Fatalf("not ready: %s", why)
	}
	if !fileIs(theirs, mustInsert(t, mustFromConf(t, testdata(t, "10-bridge.conf")))) {
		t.Fatalf("the file at our name was not replaced:\n%s", readTestFile(t, theirs))
	}
	if !strings.Contains(e.logs.String(), "has no sluice entry") {
		t.Error("the replacement was not logged")
	}
}

// TestOwnConflistSortsLast: non-chained mode (Multus, OpenShift) writes a
// file that sorts after the primary, as Istio's YYY-istio-cni does, so
// runtimes keep using the primary; the 00- file of earlier versions goes.
func TestOwnConflistSortsLast(t *testing.T) {
	e := newEnv(t)
	primary := filepath.Join(e.conf, "10-flannel.conflist")
	original := testdata(t, "10-flannel.conflist")
	writeTestFile(t, primary, original, 0o644)
	own, err := conflist.Own(conflist.PluginType, mustEntry(t, testEntryConfig))
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(e.conf, legacyOwnConfName), own, 0o644)
	in := e.newInstaller(t, e.config(false))
	in.sync()
	if ok, why := in.Ready(); !ok {
		t.Fatalf("not ready: %s", why)
	}
	assertOnly(t, e.conf, "10-flannel.conflist", OwnConfName)
	if first := firstConf(t, e.conf); first != "10-flannel.conflist" {
		t.Fatalf("runtimes would use %s", first)
	}
	if !fileIs(primary, original) || !fileIs(filepath.Join(e.conf, OwnConfName), own) {
		t.Fatal("wrong contents")
	}
}

func mustFromConf(t *testing.T, conf []byte) []byte {
	t.Helper()
	list, err := conflist.FromConf(conf)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// TestNamedConfNotMistaken: with --cni-conf-name naming a .conf that is
// (briefly) gone, another network's .conflist of the same stem is not
// taken for it; only an earlier version's conversion, holding our entry, is.
func TestNamedConfNotMistaken(t *testing.T) {
	e := newEnv(t)
	other := filepath.Join(e.conf, "10-bridge.conflist")
	data := testdata(t, "11-bridge.conflist")
	writeTestFile(t, other, data, 0o644)
	cfg := e.config(true)
	cfg.ConfName = "10-bridge.conf"
	in := e.newInstaller(t, cfg)
	in.sync()
	if ok, why := in.Ready(); ok || !strings.Contains(why, "does not exist yet") {
		t.Fatalf("ready=%v %q, want waiting for 10-bridge.conf", ok, why)
	}
	if !fileIs(other, data) {
		t.Fatal("another network's conflist was edited")
	}

	// An earlier version's conversion carries our entry: still ours to keep.
	converted := mustInsert(t, mustFromConf(t, testdata(t, "10-bridge.conf")))
	writeTestFile(t, other, converted, 0o644)
	in.sync()
	if ok, why := in.Ready(); !ok {
		t.Fatalf("not ready with an earlier conversion in place: %s", why)
	}
}

// TestOwnConflistNetworkName: Multus finds a NAD without config of its own
// by the network name of a file in the conf dir, so it is configurable.
func TestOwnConflistNetworkName(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(false)
	cfg.NetworkName = "istio-cni"
	in := e.newInstaller(t, cfg)
	in.sync()
	got := readTestFile(t, filepath.Join(e.conf, OwnConfName))
	if !bytes.Contains(got, []byte(`"name": "istio-cni"`)) {
		t.Fatalf("own conflist does not carry the network name:\n%s", got)
	}
	cfg.NetworkName = "no spaces"
	if _, err := New(cfg); err == nil {
		t.Fatal("New accepted a network name the CNI spec refuses")
	}
}
