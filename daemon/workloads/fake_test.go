package workloads

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
)

// The Store's own logic (journal, rollback, ownership, GC, reconcile) over
// redirecttest's kernel and namespaces: no root, milliseconds. The tests in
// store_test.go and ownership_test.go run the same logic on real netns.

type unit struct {
	state    string
	ns       *redirecttest.Namespaces
	kernel   *redirecttest.Fake
	store    *Store
	ambient  *Ambient
	hostIno  uint64
	mu       sync.Mutex
	reassert []string // "attachment: drift" per OnReassert
}

func newUnit(t *testing.T) *unit {
	t.Helper()
	u := &unit{state: t.TempDir(), ns: redirecttest.NewNamespaces(t), kernel: redirecttest.NewFake()}
	u.store = u.open(t)
	return u
}

// open opens a Store on u's journal, as an agent (re)starting does.
func (u *unit) open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Config{Dir: u.state, Opener: u.ns, Kernel: u.kernel, Ambient: u.ambient,
		OnReassert: func(r Record, drift []string) {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.reassert = append(u.reassert, r.Attachment.String()+": "+drift[0])
		}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (u *unit) reasserted() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reassert)
}

func (u *unit) record(id, path string) Record {
	return Record{Attachment: Attachment{ContainerID: id, IfName: "eth0"}, Network: testNetwork, Netns: path, Spec: redirect.DefaultSpec()}
}

// enroll makes a netns at /netns/<id> and enrolls id's eth0 there.
func (u *unit) enroll(t *testing.T, id string) (Record, uint64) {
	t.Helper()
	path := "/netns/" + id
	ino := u.ns.Add(path)
	r := u.record(id, path)
	if err := u.store.Enroll(context.Background(), r); err != nil {
		t.Fatalf("enroll %s: %v", id, err)
	}
	return r, ino
}

func (u *unit) hasTable(ino uint64) bool {
	_, ok := u.kernel.Table(ino)
	return ok
}

func TestUnitEnrollJournalsAndConverges(t *testing.T) {
	u := newUnit(t)
	r, ino := u.enroll(t, "c1")
	if !u.hasTable(ino) {
		t.Fatal("no table after Enroll")
	}
	if err := u.store.Enroll(context.Background(), r); err != nil {
		t.Fatalf("retried Enroll: %v", err)
	}
	got := u.open(t).List()
	if len(got) != 1 || got[0].NetnsInode != ino || got[0].RulesetHash == "" {
		t.Fatalf("reloaded journal = %+v", got)
	}
}

// A failed apply of a first ADD leaves no record, on disk or listed.
func TestUnitFailedApplyLeavesNothing(t *testing.T) {
	u := newUnit(t)
	u.ns.Add("/netns/bad")
	u.kernel.Fail(redirecttest.OpApply, errors.New("netlink says no"))
	if err := u.store.Enroll(context.Background(), u.record("bad", "/netns/bad")); err == nil {
		t.Fatal("Enroll with the kernel refusing succeeded")
	}
	if len(u.store.List()) != 0 || len(u.open(t).List()) != 0 {
		t.Fatal("a failed Enroll left a record")
	}
}

// A re-ADD whose apply fails keeps the earlier enrolment, whose table the
// atomic apply left in place, on disk.
func TestUnitFailedReAddRestoresEarlierRecord(t *testing.T) {
	u := newUnit(t)
	r, ino := u.enroll(t, "kept")
	u.kernel.Fail(redirecttest.OpApply, errors.New("netlink says no"))
	again := r
	again.PodName = "renamed"
	if err := u.store.Enroll(context.Background(), again); err == nil {
		t.Fatal("re-ADD with the kernel refusing succeeded")
	}
	got := u.open(t).List()
	if len(got) != 1 || got[0].PodName != "" || !u.hasTable(ino) {
		t.Fatalf("journal after a failed re-ADD: %+v", got)
	}
}

// A path the opener refuses is never journaled.
func TestUnitRefusedNetnsIsNotJournaled(t *testing.T) {
	u := newUnit(t)
	err := u.store.Enroll(context.Background(), u.record("x", "relative/path"))
	var rule *podns.RuleError
	if !errors.As(err, &rule) {
		t.Fatalf("Enroll into a relative path: %v, want a RuleError", err)
	}
	if len(u.open(t).List()) != 0 || u.kernel.Calls(redirecttest.OpApply) != 0 {
		t.Fatal("a refused Enroll journaled or applied")
	}
}

func TestUnitReleaseWithoutRecordTouchesNothing(t *testing.T) {
	u := newUnit(t)
	u.ns.Add("/netns/someone-else")
	if err := u.store.Release(context.Background(), Attachment{ContainerID: "unknown", IfName: "eth0"}, "/netns/someone-else"); err != nil {
		t.Fatal(err)
	}
	if n := u.kernel.Calls(redirecttest.OpRemove); n != 0 {
		t.Fatalf("DEL of an unknown attachment removed %d tables", n)
	}
}

// A Remove that fails keeps the record, so a retried DEL or the
// reconciler still knows the table is ours.
func TestUnitFailedRemoveKeepsRecord(t *testing.T) {
	u := newUnit(t)
	r, ino := u.enroll(t, "stuck")
	u.kernel.Fail(redirecttest.OpRemove, errors.New("netlink says no"))
	if err := u.store.Release(context.Background(), r.Attachment, r.Netns); err == nil {
		t.Fatal("Release with Remove failing succeeded")
	}
	if len(u.store.List()) != 1 || len(u.open(t).List()) != 1 || !u.hasTable(ino) {
		t.Fatal("a failed Release lost the record of a table still in the kernel")
	}
	u.kernel.Fail(redirecttest.OpRemove, nil)
	if err := u.store.Release(context.Background(), r.Attachment, r.Netns); err != nil || u.hasTable(ino) {
		t.Fatalf("retried Release: %v, table left %v", err, u.hasTable(ino))
	}
}

// Release tells the kernel what was applied (the record's ruleset), which
// lets Remove skip reading back routes and addresses it never added.
func TestUnitReleaseSaysWhatWasApplied(t *testing.T) {
	u := newUnit(t)
	r, ino := u.enroll(t, "told")
	want, err := redirect.Build(r.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.store.Release(context.Background(), r.Attachment, r.Netns); err != nil {
		t.Fatal(err)
	}
	if got := u.kernel.RemovedWith(ino); got == nil || got.Hash() != want.Hash() {
		t.Fatalf("Remove was told %v, want the record's ruleset", got)
	}
}

func TestUnitSharedNetnsKeepsTableUntilLastRelease(t *testing.T) {
	u := newUnit(t)
	eth0, ino := u.enroll(t, "multus")
	net1 := eth0
	net1.IfName = "net1"
	if err := u.store.Enroll(context.Background(), net1); err != nil {
		t.Fatal(err)
	}
	if err := u.store.Release(context.Background(), net1.Attachment, net1.Netns); err != nil {
		t.Fatal(err)
	}
	if !u.hasTable(ino) {
		t.Fatal("releasing net1 removed the table eth0 still needs")
	}
	if err := u.store.Release(context.Background(), eth0.Attachment, eth0.Netns); err != nil {
		t.Fatal(err)
	}
	if u.hasTable(ino) {
		t.Fatal("releasing the last attachment left the table")
	}
}

func TestUnitReAddIntoAnotherNetnsReleasesTheFirst(t *testing.T) {
	u := newUnit(t)
	r, first := u.enroll(t, "moved")
	second := u.ns.Add("/netns/moved-2")
	r.Netns = "/netns/moved-2"
	if err := u.store.Enroll(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if u.hasTable(first) || !u.hasTable(second) {
		t.Fatalf("after the move: first netns table %v, second %v", u.hasTable(first), u.hasTable(second))
	}
}

// pid reuse: the enrolled path names another netns now. DEL and the
// reconciler forget the record and never touch the netns behind the path.
func TestUnitReusedPathIsNeverTouched(t *testing.T) {
	for _, verb := range []string{"release", "reconcile"} {
		t.Run(verb, func(t *testing.T) {
			u := newUnit(t)
			r, _ := u.enroll(t, "reused")
			other := u.ns.Replace(r.Netns)
			var err error
			if verb == "release" {
				err = u.store.Release(context.Background(), r.Attachment, r.Netns)
			} else {
				err = u.store.Reconcile(context.Background())
			}
			if err != nil {
				t.Fatal(err)
			}
			if u.hasTable(other) || u.kernel.Calls(redirecttest.OpRemove) != 0 {
				t.Fatal("the namespace now behind the path was touched")
			}
			if len(u.store.List()) != 0 || len(u.open(t).List()) != 0 {
				t.Fatalf("record kept for a path that names another netns: %+v", u.store.List())
			}
		})
	}
}

// Drift is reasserted and reported; a netns that is gone is dropped: by the
// start-up Reconcile of a freshly opened Store, and by the periodic
// resync's pass alike.
func TestUnitReconcileReassertsAndDrops(t *testing.T) {
	for name, pass := range map[string]func(*Store) error{
		"Reconcile":   func(s *Store) error { return s.Reconcile(context.Background()) },
		"resync pass": func(s *Store) error { return s.resyncPass(context.Background(), 50*time.Millisecond, true) },
	} {
		t.Run(name, func(t *testing.T) { reassertsAndDrops(t, pass) })
	}
}

func reassertsAndDrops(t *testing.T, pass func(*Store) error) {
	u := newUnit(t)
	_, tampered := u.enroll(t, "tampered")
	gone, _ := u.enroll(t, "gone")
	u.ns.Delete(gone.Netns)
	u.kernel.Tamper(tampered)

	s := u.open(t) // a restarted agent
	if err := pass(s); err != nil {
		t.Fatal(err)
	}
	if s.Reasserts() != 1 {
		t.Errorf("reasserts = %d, want 1", s.Reasserts())
	}
	if got := s.Restored(); got[RestoredRuleset] != 1 || got[RestoredRoutes]+got[RestoredAddresses]+got[RestoredHostTable] != 0 {
		t.Errorf("restored by what = %v, want one ruleset", got)
	}
	if got := u.reasserted(); len(got) != 1 || got[0] != "tampered/eth0: table inet sluice: a rule was changed (tampered)" {
		t.Errorf("OnReassert heard %q", got)
	}
	if got := s.List(); len(got) != 1 || got[0].ContainerID != "tampered" {
		t.Fatalf("after the pass: %+v", got)
	}
	if d, err := s.Verify(s.List()[0]); err != nil || len(d) != 0 {
		t.Fatalf("tampered netns not reasserted: %v %v", d, err)
	}
	if err := pass(s); err != nil || s.Reasserts() != 1 {
		t.Fatalf("a second pass with nothing drifted: %v, reasserts %d", err, s.Reasserts())
	}
}

// A Reconcile that cannot read the kernel says so and changes nothing.
func TestUnitReconcileVerifyFailureIsReported(t *testing.T) {
	u := newUnit(t)
	u.enroll(t, "c1")
	u.kernel.Fail(redirecttest.OpVerifySince, errors.New("netlink says no"))
	if err := u.store.Reconcile(context.Background()); err == nil {
		t.Fatal("Reconcile hid a failed Verify")
	}
	if len(u.store.List()) != 1 || u.kernel.Calls(redirecttest.OpApply) != 1 {
		t.Fatal("a failed Verify dropped or re-applied")
	}
}

func TestUnitCheckReportsDrift(t *testing.T) {
	u := newUnit(t)
	r, ino := u.enroll(t, "c1")
	if d, err := u.store.Check(context.Background(), r.Attachment, r.Netns, r.Spec); err != nil || len(d) != 0 {
		t.Fatalf("Check in sync: %v %v", d, err)
	}
	u.kernel.Tamper(ino)
	if d, err := u.store.Check(context.Background(), r.Attachment, r.Netns, r.Spec); err != nil || len(d) != 1 {
		t.Fatalf("Check after tampering: %v %v", d, err)
	}
	d, err := u.store.Check(context.Background(), Attachment{ContainerID: "other", IfName: "eth0"}, r.Netns, r.Spec)
	if err != nil || !slices.Contains(d, "attachment other/eth0 is not enrolled") {
		t.Fatalf("Check of an attachment never enrolled: %v %v", d, err)
	}
}

func TestUnitGC(t *testing.T) {
	u := newUnit(t)
	keep, keepIno := u.enroll(t, "keep")
	_, dropIno := u.enroll(t, "drop")
	lateIno := u.ns.Add("/netns/late")
	late := u.record("late-u1", "/netns/late")
	late.Late = true
	oldIno := u.ns.Add("/netns/old")
	old := u.record("old", "/netns/old")
	old.Network = "" // journaled by an agent before networks were kept
	otherIno := u.ns.Add("/netns/other")
	other := u.record("other", "/netns/other")
	other.Network = "net-b"
	for _, r := range []Record{late, old, other} {
		if err := u.store.Enroll(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if removed, err := u.store.GC(context.Background(), "", nil); err != nil || len(removed) != 0 {
		t.Fatalf("GC without a network removed %v (%v)", removed, err)
	}
	removed, err := u.store.GC(context.Background(), testNetwork, []Attachment{keep.Attachment})
	if err != nil || len(removed) != 1 || removed[0].ContainerID != "drop" {
		t.Fatalf("GC removed %v (%v), want drop only", removed, err)
	}
	for name, ino := range map[string]uint64{"keep": keepIno, "late": lateIno, "old": oldIno, "other network": otherIno} {
		if !u.hasTable(ino) {
			t.Errorf("GC removed the table of %s", name)
		}
	}
	if u.hasTable(dropIno) {
		t.Error("GC left the stale attachment's table")
	}
}

// Many ADDs and DELs at once, some sharing a netns: the kernel ends with
// exactly the tables of what is still listed (run with -race).
func TestUnitConcurrentVerbs(t *testing.T) {
	u := newUnit(t)
	const n = 32
	for i := range n / 2 {
		u.ns.Add("/netns/shared-" + string(rune('a'+i)))
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := u.record("c"+string(rune('a'+i)), "/netns/shared-"+string(rune('a'+i/2)))
			if err := u.store.Enroll(context.Background(), r); err != nil {
				t.Error(err)
				return
			}
			if i%2 == 1 {
				if err := u.store.Release(context.Background(), r.Attachment, r.Netns); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got := len(u.store.List()); got != n/2 {
		t.Fatalf("%d records, want %d", got, n/2)
	}
	for i := range n / 2 {
		if !u.hasTable(u.ns.Inode("/netns/shared-" + string(rune('a'+i)))) {
			t.Errorf("netns %d lost the table its remaining attachment owns", i)
		}
	}
}

// A reconcile reads a pod's table back only when its netns's generation
// moved since the Apply (or since a read that found no drift), and the
// generation it verified reaches the journal: a restarted agent skips the
// untouched pod too, and still finds the one changed behind its back.
func TestUnitReconcileReadsOnlyWhatChanged(t *testing.T) {
	u := newUnit(t)
	u.enroll(t, "quiet")
	_, touched := u.enroll(t, "touched")
	reads := func() int { return u.kernel.Calls(redirecttest.OpVerify) }
	if err := u.store.Reconcile(context.Background()); err != nil || reads() != 0 {
		t.Fatalf("reconcile right after the ADDs read %d tables (%v), want 0", reads(), err)
	}
	u.kernel.Tamper(touched)
	s := u.open(t) // a restarted agent: generations from the journal
	if err := s.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if reads() != 1 || s.Reasserts() != 1 {
		t.Fatalf("restart reconcile read %d tables and reasserted %d, want 1 and 1 (the touched pod only)", reads(), s.Reasserts())
	}
	// The reassert's own commit is the touched pod's generation now.
	if err := u.open(t).Reconcile(context.Background()); err != nil || reads() != 1 {
		t.Fatalf("a third start read %d tables in all (%v), want still 1", reads(), err)
	}
}

// Two records name one netns only when their identities agree: a dead
// pod's record and a new pod's whose netns took the freed inode do not
// (nsfs hands out the lowest free inode), so neither keeps or restores a
// table for the other.
func TestUnitSameNetnsByCookie(t *testing.T) {
	dead := &Record{Netns: "/proc/10/ns/net", NetnsInode: 4026532100, NetnsCookie: 7}
	fresh := &Record{Netns: "/var/run/netns/b", NetnsInode: 4026532100, NetnsCookie: 9}
	sibling := &Record{Netns: "/proc/11/ns/net", NetnsInode: 4026532100, NetnsCookie: 7}
	if sameNetns(dead, fresh) {
		t.Error("a reused inode was taken for the same netns")
	}
	if !sameNetns(dead, sibling) {
		t.Error("two paths to one netns were taken for two")
	}
	old := &Record{Netns: "/var/run/netns/b", NetnsInode: 4026532100} // journaled before cookies
	if !sameNetns(old, fresh) {
		t.Error("a record without a cookie is no longer matched by inode")
	}
}

// Get is asked on every ADD: it looks one record up, allocating nothing
// whatever the number enrolled, and an empty ifName finds the container's
// first interface. It copied and sorted every record before, thousands of
// allocations per ADD at 5,000 pods.
func TestUnitGetIsALookup(t *testing.T) {
	u := newUnit(t)
	for i := range 300 {
		u.enroll(t, fmt.Sprintf("c%03d", i))
	}
	second := u.record("c007", "/netns/c007")
	second.IfName = "net1"
	if err := u.store.Enroll(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		a      Attachment
		ifName string
		found  bool
	}{
		{Attachment{ContainerID: "c007", IfName: "net1"}, "net1", true},
		{Attachment{ContainerID: "c007"}, "eth0", true},
		{Attachment{ContainerID: "c299", IfName: "eth0"}, "eth0", true},
		{Attachment{ContainerID: "c300", IfName: "eth0"}, "", false},
		{Attachment{ContainerID: "c300"}, "", false},
	} {
		r, ok := u.store.Get(tc.a)
		if ok != tc.found || r.IfName != tc.ifName || (ok && r.ContainerID != tc.a.ContainerID) {
			t.Errorf("Get(%v) = %v/%v, %v; want ifName %q, %v", tc.a, r.ContainerID, r.IfName, ok, tc.ifName, tc.found)
		}
	}
	a := Attachment{ContainerID: "c150", IfName: "eth0"}
	if n := testing.AllocsPerRun(100, func() { u.store.Get(a) }); n > 1 {
		t.Errorf("Get with 301 records enrolled: %v allocations, want at most 1 (a lookup, not a sorted copy)", n)
	}
}
