package workloads

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

const testNetwork = "test-net"

type fixture struct {
	root, state string
	store       *Store
	ambient     *Ambient // for stores opened after it is set
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	nstest.RequireRoot(t)
	f := &fixture{root: t.TempDir(), state: t.TempDir()}
	f.store = f.open(t)
	return f
}

func (f *fixture) open(t testing.TB) *Store {
	t.Helper()
	o, err := podns.NewOpener([]string{f.root, "/proc"}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Config{Dir: f.state, Opener: o, Kernel: kernel.Netlink{}, Log: slog.New(slog.DiscardHandler), Ambient: f.ambient})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fixture) enroll(t testing.TB, id string) (*nstest.NS, Record) {
	t.Helper()
	ns := nstest.NewIn(t, f.root, id)
	r := Record{Attachment: Attachment{ContainerID: id, IfName: "eth0"}, Network: testNetwork, Netns: ns.Path, Spec: redirect.DefaultSpec()}
	if err := f.store.Enroll(context.Background(), r); err != nil {
		t.Fatalf("enroll %s: %v", id, err)
	}
	return ns, r
}

func hasTable(t *testing.T, ns *nstest.NS) bool {
	t.Helper()
	return ns.Command("nft", "list", "table", "inet", "sluice").Run() == nil
}

func TestEnrollReleaseJournal(t *testing.T) {
	f := newFixture(t)
	ns, r := f.enroll(t, "c1")
	if !hasTable(t, ns) {
		t.Fatal("no table after Enroll")
	}
	if _, err := os.Stat(filepath.Join(f.state, "c1:eth0.json")); err != nil {
		t.Fatalf("journal record: %v", err)
	}
	// A restarted agent sees the same workloads.
	if got := f.open(t).List(); len(got) != 1 || got[0].RulesetHash == "" || got[0].Netns != r.Netns {
		t.Fatalf("reloaded journal = %+v", got)
	}
	if err := f.store.Enroll(context.Background(), r); err != nil {
		t.Fatalf("second Enroll: %v", err)
	}
	if err := f.store.Release(context.Background(), r.Attachment, ""); err != nil {
		t.Fatal(err)
	}
	if hasTable(t, ns) || len(f.store.List()) != 0 {
		t.Fatal("Release left state")
	}
	if err := f.store.Release(context.Background(), r.Attachment, ""); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}

func TestGCKeepsValidOnly(t *testing.T) {
	f := newFixture(t)
	keep, rk := f.enroll(t, "keep")
	drop, _ := f.enroll(t, "drop")
	removed, err := f.store.GC(context.Background(), testNetwork, []Attachment{rk.Attachment})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].ContainerID != "drop" {
		t.Fatalf("GC removed %v", removed)
	}
	if !hasTable(t, keep) || hasTable(t, drop) {
		t.Fatal("GC touched the wrong netns")
	}
}

func TestReconcileReassertsAndDrops(t *testing.T) {
	f := newFixture(t)
	flushed, _ := f.enroll(t, "flushed")
	gone, _ := f.enroll(t, "gone")
	flushed.Run(t, "nft", "flush", "table", "inet", "sluice")
	unix.Unmount(gone.Path, unix.MNT_DETACH)
	os.Remove(gone.Path)

	s := f.open(t)
	if err := s.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.Reasserts() != 1 {
		t.Errorf("reasserts = %d, want 1", s.Reasserts())
	}
	if got := s.List(); len(got) != 1 || got[0].ContainerID != "flushed" {
		t.Fatalf("after reconcile: %+v", got)
	}
	if d, err := s.Verify(s.List()[0]); err != nil || len(d) != 0 {
		t.Fatalf("flushed netns not reasserted: %v %v", d, err)
	}
}

func TestJournalSurvivesGarbage(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(filepath.Join(f.state, "bad:eth0.json"), []byte("{not json"), 0o600)
	os.WriteFile(filepath.Join(f.state, "renamed:eth0.json"), []byte(`{"containerID":"other","ifName":"eth0"}`), 0o600)
	os.WriteFile(filepath.Join(f.state, ".tmp-123"), []byte("half"), 0o600)
	s := f.open(t)
	if len(s.List()) != 0 {
		t.Fatalf("garbage loaded: %+v", s.List())
	}
	for _, name := range []string{"bad:eth0.json.corrupt", "renamed:eth0.json.corrupt"} {
		if _, err := os.Stat(filepath.Join(f.state, name)); err != nil {
			t.Errorf("%s not kept aside: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(f.state, ".tmp-123")); !os.IsNotExist(err) {
		t.Error("stale temp file kept")
	}
}

func TestEnrollRefusesBadNetns(t *testing.T) {
	f := newFixture(t)
	r := Record{Attachment: Attachment{ContainerID: "x", IfName: "eth0"}, Netns: "/etc/passwd", Spec: redirect.DefaultSpec()}
	if err := f.store.Enroll(context.Background(), r); err == nil {
		t.Fatal("Enroll into /etc/passwd succeeded")
	}
	if len(f.store.List()) != 0 {
		t.Fatal("refused Enroll journaled")
	}
	if ents, _ := os.ReadDir(f.state); len(ents) != 1 || ents[0].Name() != stateMarker {
		t.Fatalf("refused Enroll wrote %d files besides the state dir's marker", len(ents)-1)
	}
}

// A late enrolment is the agent's own, never in the runtime's valid list:
// CNI GC must not strip a live pod of its capture.
func TestGCLeavesLateEnrolments(t *testing.T) {
	f := newFixture(t)
	ns := nstest.NewIn(t, f.root, "late")
	r := Record{Attachment: Attachment{ContainerID: "late-u1", IfName: "eth0"}, Network: testNetwork, Netns: ns.Path, Spec: redirect.DefaultSpec(), Late: true}
	if err := f.store.Enroll(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if removed, err := f.store.GC(context.Background(), testNetwork, nil); err != nil || len(removed) != 0 {
		t.Fatalf("GC removed %v (%v)", removed, err)
	}
	if !hasTable(t, ns) {
		t.Fatal("GC removed a late enrolment's table")
	}
}

// A path that comes to name another netns (a /proc/<pid> path after pid
// reuse) is the enrolled one gone: the reconciler drops the record and never
// touches the namespace now behind the path.
func TestReconcileNeverTouchesAReusedPath(t *testing.T) {
	f := newFixture(t)
	ns, _ := f.enroll(t, "reused")
	unix.Unmount(ns.Path, unix.MNT_DETACH)
	os.Remove(ns.Path)
	other := nstest.NewIn(t, f.root, "reused") // same path, another netns
	s := f.open(t)
	if err := s.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(s.List()) != 0 {
		t.Fatalf("record kept for a path that names another netns: %+v", s.List())
	}
	if hasTable(t, other) {
		t.Fatal("the reconciler programmed the namespace now behind the path")
	}
}
