package workloads

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
)

// The Store's own logic (journal, rollback, ownership, GC, reconcile) over
// redirecttest's kernel and namespaces: no root, milliseconds. What holds
// on the real kernel too is a row of scenarios_test.go, run on both; these
// are the fake's alone (injected failures, counted reads, allocations).

type unit struct {
	state   string
	ns      *redirecttest.Namespaces
	kernel  *redirecttest.Fake
	seam    *watched // the Store's kernel: kernel, its calls counted again
	store   *Store
	ambient *Ambient
	hostIno uint64
	heard   heard
}

func newUnit(t *testing.T) *unit {
	t.Helper()
	u := newUnitBare(t)
	u.store = u.open(t)
	return u
}

// newUnitBare is a unit without a Store yet.
func newUnitBare(t *testing.T) *unit {
	fake := redirecttest.NewFake()
	return &unit{state: t.TempDir(), ns: redirecttest.NewNamespaces(t), kernel: fake, seam: &watched{Kernel: fake}}
}

// open opens a Store on u's journal, as an agent (re)starting does.
func (u *unit) open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Config{Dir: u.state, Opener: u.ns, Kernel: u.seam, Ambient: u.ambient, OnReassert: u.heard.reassert})
	if err != nil {
		t.Fatal(err)
	}
	return s
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
