package workloads

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
)

// The Store's journal, ownership, reconcile, GC and ambient hand-over, one
// table whose rows run on both kernels (kernels_test.go).

type scenario struct {
	name    string
	ambient bool // a fake ztunnel and a host netns with the probe table
	run     func(t *testing.T, b *testbed)
}

func TestScenarios(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, k := range kernels(t) {
				t.Run(k.name, func(t *testing.T) {
					if k.skip != "" {
						t.Skip(k.skip)
					}
					sc.run(t, k.bed(t, sc.ambient))
				})
			}
		})
	}
}

var scenarios = []scenario{
	{name: "an enrolment is journaled, converges and is released once", run: enrolmentJournaled},
	{name: "a refused netns is never journaled", run: refusedNetns},
	{name: "a failed re-ADD keeps the earlier enrolment", run: failedReAdd},
	{name: "a DEL without a record touches nothing", run: releaseWithoutRecord},
	{name: "a shared netns keeps its table until the last release", run: sharedNetns},
	{name: "two containers' records on one netns", run: sharedNetnsAcrossContainers},
	{name: "a re-ADD into another netns releases the first", run: reAddElsewhere},
	{name: "a reused path: DEL", run: reusedPath("release", false)},
	{name: "a reused path with a table: DEL", run: reusedPath("release", true)},
	{name: "a reused path: reconcile", run: reusedPath("reconcile", false)},
	{name: "a reused path with a table: reconcile", run: reusedPath("reconcile", true)},
	{name: "a reused path: reconcile after a restart", run: reusedPath("restart", false)},
	{name: "a reused path with a table: reconcile after a restart", run: reusedPath("restart", true)},
	{name: "Reconcile reasserts drift and drops a gone netns", run: reassertsAndDrops(func(s *Store) error {
		return s.Reconcile(context.Background())
	})},
	{name: "the resync pass reasserts drift and drops a gone netns", run: reassertsAndDrops(func(s *Store) error {
		return s.resyncPass(context.Background(), 50*time.Millisecond, true)
	})},
	{name: "GC releases only its network's stale attachments", run: gcKeepsValidOnly},
	{name: "GC leaves late enrolments", run: gcLeavesLate},
	{name: "GC is scoped to the calling network", run: gcScopedToNetwork},
	{name: "GC leaves records journaled without a network", run: gcLeavesUnscoped},
	{name: "ztunnel's refusal rolls the ADD back", ambient: true, run: ztunnelRefusal},
	{name: "ztunnel hears Del after the rules go", ambient: true, run: lastAttachment("10.0.0.8")},
	{name: "ztunnel hears Del for the last sandbox only, one IP", ambient: true, run: lastAttachment("10.0.0.5", "10.0.0.5")},
	{name: "ztunnel hears Del for the last sandbox only, an IP each", ambient: true, run: lastAttachment("10.0.0.5", "10.0.0.6")},
	{name: "dropping a gone pod keeps a reused probe IP", ambient: true, run: probeIPKept(false)},
	{name: "reconcile refills a host table recreated empty", ambient: true, run: probeIPKept(true)},
}

func enrolmentJournaled(t *testing.T, b *testbed) {
	ctx := context.Background()
	r, ino := b.enroll(t, "c1")
	if !b.hasTable(t, r.Netns) {
		t.Fatal("no table after Enroll")
	}
	if _, err := os.Stat(filepath.Join(b.state, "c1:eth0.json")); err != nil {
		t.Fatalf("journal record: %v", err)
	}
	// A restarted agent sees the same workloads.
	journaled := func(when string) {
		t.Helper()
		if got := b.open(t).List(); len(got) != 1 || got[0].RulesetHash == "" || got[0].Netns != r.Netns || got[0].NetnsInode != ino {
			t.Fatalf("reloaded journal %s = %+v", when, got)
		}
	}
	journaled("after Enroll")
	if err := b.store.Enroll(ctx, r); err != nil {
		t.Fatalf("retried Enroll: %v", err)
	}
	journaled("after a retried Enroll")
	if err := b.store.Release(ctx, r.Attachment, ""); err != nil {
		t.Fatal(err)
	}
	if b.hasTable(t, r.Netns) || len(b.store.List()) != 0 {
		t.Fatal("Release left state")
	}
	if err := b.store.Release(ctx, r.Attachment, ""); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}

// A path the opener refuses is never journaled, applied or written down.
func refusedNetns(t *testing.T, b *testbed) {
	for _, tc := range []struct {
		path string
		rule bool // refused by a podns rule
	}{{"relative/path", true}, {"/etc/passwd", false}} {
		err := b.store.Enroll(context.Background(), b.record("x", tc.path))
		var rule *podns.RuleError
		if err == nil || tc.rule && !errors.As(err, &rule) {
			t.Fatalf("Enroll into %s: %v, want a refusal (a RuleError: %v)", tc.path, err, tc.rule)
		}
		if len(b.store.List()) != 0 || len(b.open(t).List()) != 0 || b.kernel.Calls(redirecttest.OpApply) != 0 {
			t.Fatalf("a refused Enroll into %s journaled or applied", tc.path)
		}
		if ents, _ := os.ReadDir(b.state); len(ents) != 1 || ents[0].Name() != stateMarker {
			t.Fatalf("refused Enroll into %s wrote %d files besides the state dir's marker", tc.path, len(ents)-1)
		}
	}
}

// A re-ADD that fails (a netns refused, a Spec Build refuses, the kernel
// refusing the apply) keeps the earlier, working enrolment on disk: the
// journal still names the table that is in the kernel.
func failedReAdd(t *testing.T, b *testbed) {
	r, _ := b.enroll(t, "kept")
	for _, tc := range []struct {
		what    string
		change  func(*Record)
		refused error // the kernel's answer to Apply
	}{
		{"into /etc/passwd", func(r *Record) { r.Netns = "/etc/passwd" }, nil},
		{"of an invalid Spec", func(r *Record) { r.Spec.OutboundPort = 0 }, nil},
		{"with the kernel refusing", func(r *Record) { r.PodName = "renamed" }, errors.New("netlink says no")},
	} {
		bad := r
		tc.change(&bad)
		b.kernel.Fail(redirecttest.OpApply, tc.refused)
		if err := b.store.Enroll(context.Background(), bad); err == nil {
			t.Fatalf("re-ADD %s succeeded", tc.what)
		}
		b.kernel.Fail(redirecttest.OpApply, nil)
		if got := b.open(t).List(); len(got) != 1 || got[0].Netns != r.Netns || got[0].PodName != "" || !b.hasTable(t, r.Netns) {
			t.Fatalf("journal after a failed re-ADD %s: %+v (table %v)", tc.what, got, b.hasTable(t, r.Netns))
		}
	}
}

// A DEL for an attachment the agent has no record of names a path that may
// by now be another pod's netns (or the shared netns of a Multus sibling):
// it touches no kernel state.
func releaseWithoutRecord(t *testing.T, b *testbed) {
	path, _ := b.add(t, "someone-else")
	b.plant(t, path)
	if err := b.store.Release(context.Background(), Attachment{ContainerID: "unknown", IfName: "eth0"}, path); err != nil {
		t.Fatal(err)
	}
	if n := b.kernel.Calls(redirecttest.OpRemove); n != 0 {
		t.Fatalf("DEL of an unknown attachment removed %d tables", n)
	}
	if !b.hasTable(t, path) {
		t.Fatal("DEL of an unknown attachment removed the table of the netns it named")
	}
}

// Multus: eth0 and net1 of one sandbox are two attachments in one netns.
// The table stays until the last of them is released.
func sharedNetns(t *testing.T, b *testbed) {
	ctx := context.Background()
	eth0, _ := b.enroll(t, "multus")
	net1 := eth0
	net1.IfName = "net1"
	if err := b.store.Enroll(ctx, net1); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Release(ctx, net1.Attachment, net1.Netns); err != nil {
		t.Fatal(err)
	}
	if !b.hasTable(t, eth0.Netns) {
		t.Fatal("releasing net1 removed the table eth0 still needs")
	}
	if got := b.store.List(); len(got) != 1 || got[0].IfName != "eth0" {
		t.Fatalf("records after releasing net1: %+v", got)
	}
	if err := b.store.Release(ctx, eth0.Attachment, eth0.Netns); err != nil {
		t.Fatal(err)
	}
	if b.hasTable(t, eth0.Netns) {
		t.Fatal("releasing the last attachment left the table")
	}
}

// Two different sandboxes whose paths name one netns (a hostile or broken
// runtime): releasing one must not strip the other.
func sharedNetnsAcrossContainers(t *testing.T, b *testbed) {
	first, _ := b.enroll(t, "first")
	second := b.record("second", first.Netns)
	second.Network = ""
	if err := b.store.Enroll(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Release(context.Background(), first.Attachment, first.Netns); err != nil {
		t.Fatal(err)
	}
	if !b.hasTable(t, first.Netns) {
		t.Fatal("releasing one container removed the table another one's record owns")
	}
}

// A re-ADD of one attachment into another netns moves it: the first netns
// must not keep a table nobody owns.
func reAddElsewhere(t *testing.T, b *testbed) {
	r, _ := b.enroll(t, "moved")
	first := r.Netns
	r.Netns, _ = b.add(t, "moved-2")
	if err := b.store.Enroll(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if b.hasTable(t, first) {
		t.Fatal("re-ADD into another netns left the first netns's table orphaned")
	}
	if !b.hasTable(t, r.Netns) {
		t.Fatal("re-ADD did not program the new netns")
	}
	if err := b.store.Release(context.Background(), r.Attachment, ""); err != nil {
		t.Fatal(err)
	}
	if b.hasTable(t, r.Netns) {
		t.Fatal("Release after a move left the new netns's table")
	}
}

// pid reuse: the enrolled path names another netns now (with a table of
// its own, or none). DEL, the reconciler and a restarted agent's
// reconciler forget the record and never touch the netns behind the path.
func reusedPath(verb string, planted bool) func(*testing.T, *testbed) {
	return func(t *testing.T, b *testbed) {
		ctx := context.Background()
		r, _ := b.enroll(t, "reused")
		b.replace(t, r.Netns)
		if planted {
			b.plant(t, r.Netns)
		}
		s := b.store
		var err error
		switch verb {
		case "release":
			err = s.Release(ctx, r.Attachment, r.Netns)
		case "reconcile":
			err = s.Reconcile(ctx)
		case "restart":
			s = b.open(t)
			err = s.Reconcile(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if b.hasTable(t, r.Netns) != planted || b.kernel.Calls(redirecttest.OpRemove) != 0 {
			t.Fatalf("the namespace now behind the path was touched: table %v (was %v), %d Removes",
				b.hasTable(t, r.Netns), planted, b.kernel.Calls(redirecttest.OpRemove))
		}
		if len(s.List()) != 0 || len(b.open(t).List()) != 0 {
			t.Fatalf("record kept for a path that names another netns: %+v", s.List())
		}
	}
}

// Drift is reasserted and reported, and a netns that is gone is dropped,
// by a freshly opened Store's pass.
func reassertsAndDrops(pass func(*Store) error) func(*testing.T, *testbed) {
	return func(t *testing.T, b *testbed) {
		tampered, _ := b.enroll(t, "tampered")
		gone, _ := b.enroll(t, "gone")
		b.delete(t, gone.Netns)
		drift := b.tamper(t, tampered.Netns)

		s := b.open(t) // a restarted agent
		if err := pass(s); err != nil {
			t.Fatal(err)
		}
		if s.Reasserts() != 1 {
			t.Errorf("reasserts = %d, want 1", s.Reasserts())
		}
		if got := s.Restored(); got[RestoredRuleset] != 1 || got[RestoredRoutes]+got[RestoredAddresses]+got[RestoredHostTable] != 0 {
			t.Errorf("restored by what = %v, want one ruleset", got)
		}
		if got := b.heard.all(); len(got) != 1 || got[0] != "tampered/eth0: "+drift {
			t.Errorf("OnReassert heard %q, want %q", got, "tampered/eth0: "+drift)
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
}

// GC removes the calling network's attachments the runtime no longer
// lists, and nothing it cannot prove stale: late enrolments, records
// without a network, another network's, and everything on a GC without a
// network.
func gcKeepsValidOnly(t *testing.T, b *testbed) {
	ctx := context.Background()
	keep, _ := b.enroll(t, "keep")
	drop, _ := b.enroll(t, "drop")
	late := b.record("late-u1", "")
	late.Netns, _ = b.add(t, "late")
	late.Late = true
	old := b.record("old", "")
	old.Netns, _ = b.add(t, "old")
	old.Network = "" // journaled by an agent before networks were kept
	other := b.record("other", "")
	other.Netns, _ = b.add(t, "other")
	other.Network = "net-b"
	for _, r := range []Record{late, old, other} {
		if err := b.store.Enroll(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if removed, err := b.store.GC(ctx, "", nil); err != nil || len(removed) != 0 {
		t.Fatalf("GC without a network removed %v (%v)", removed, err)
	}
	removed, err := b.store.GC(ctx, testNetwork, []Attachment{keep.Attachment})
	if err != nil || len(removed) != 1 || removed[0].ContainerID != "drop" {
		t.Fatalf("GC removed %v (%v), want drop only", removed, err)
	}
	for name, r := range map[string]Record{"keep": keep, "late": late, "old": old, "other network": other} {
		if !b.hasTable(t, r.Netns) {
			t.Errorf("GC removed the table of %s", name)
		}
	}
	if b.hasTable(t, drop.Netns) {
		t.Error("GC left the stale attachment's table")
	}
}

// A late enrolment is the agent's own, never in the runtime's valid list:
// CNI GC must not strip a live pod of its capture.
func gcLeavesLate(t *testing.T, b *testbed) {
	path, _ := b.add(t, "late")
	r := b.record("late-u1", path)
	r.Late = true
	if err := b.store.Enroll(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if removed, err := b.store.GC(context.Background(), testNetwork, nil); err != nil || len(removed) != 0 {
		t.Fatalf("GC removed %v (%v)", removed, err)
	}
	if !b.hasTable(t, path) {
		t.Fatal("GC removed a late enrolment's table")
	}
}

// GC is scoped to the calling network: another network's GC, whatever its
// valid list, never releases this network's attachments.
func gcScopedToNetwork(t *testing.T, b *testbed) {
	ctx := context.Background()
	ra := b.record("a", "")
	ra.Netns, _ = b.add(t, "a")
	ra.Network = "net-a"
	rb := b.record("b", "")
	rb.Netns, _ = b.add(t, "b")
	rb.Network = "net-b"
	for _, r := range []Record{ra, rb} {
		if err := b.store.Enroll(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := b.store.GC(ctx, "other-net", nil)
	if err != nil || len(removed) != 0 {
		t.Fatalf("GC of other-net removed %v (%v)", removed, err)
	}
	removed, err = b.store.GC(ctx, "net-a", nil)
	if err != nil || len(removed) != 1 || removed[0] != ra.Attachment {
		t.Fatalf("GC of net-a removed %v (%v)", removed, err)
	}
	if b.hasTable(t, ra.Netns) || !b.hasTable(t, rb.Netns) {
		t.Fatal("GC of net-a touched the wrong netns")
	}
	if got := b.open(t).List(); len(got) != 1 || got[0].Network != "net-b" {
		t.Fatalf("journal after GC: %+v", got)
	}
}

// A record journaled before network names were kept cannot be proven to
// belong to the calling network: no GC releases it.
func gcLeavesUnscoped(t *testing.T, b *testbed) {
	path, _ := b.add(t, "old")
	r := b.record("old", path)
	r.Network = "" // as an older agent wrote it
	if err := b.store.Enroll(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	removed, err := b.store.GC(context.Background(), "net-a", nil)
	if err != nil || len(removed) != 0 {
		t.Fatalf("GC removed %v (%v)", removed, err)
	}
	if !b.hasTable(t, path) {
		t.Fatal("GC removed an unscoped record's table")
	}
}

// A ztunnel that refuses fails the ADD with ErrZtunnel (the pod is then
// marked pending) and leaves nothing behind.
func ztunnelRefusal(t *testing.T, b *testbed) {
	b.zt.refuse = errors.New("no")
	r := b.ambientRecord(t, "refused", "uid-r", "10.0.0.10/24")
	if err := b.store.Enroll(context.Background(), r); !errors.Is(err, ErrZtunnel) {
		t.Fatalf("Enroll with ztunnel refusing: %v, want ErrZtunnel", err)
	}
	if b.hasTable(t, r.Netns) || b.hostHas(t, "10.0.0.10") || len(b.store.List()) != 0 || len(b.open(t).List()) != 0 {
		t.Fatal("a refused ambient ADD left state behind")
	}
}

// One pod's sandboxes, one an IP: ztunnel hears Del(uid) only when the
// pod's last attachment goes (a recreated sandbox keeps its proxy), after
// the in-pod rules are gone (Istio's order: no moment with capture and no
// proxy); a probe address leaves the host table with its last holder.
func lastAttachment(ips ...string) func(*testing.T, *testbed) {
	return func(t *testing.T, b *testbed) {
		ctx := context.Background()
		var recs []Record
		for i, ip := range ips {
			r := b.ambientRecord(t, fmt.Sprintf("sandbox-%d", i+1), "uid-1", ip+"/24")
			if err := b.store.Enroll(ctx, r); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
		last := recs[len(recs)-1]
		tableAtDel := true
		b.zt.onDel = func() { tableAtDel = b.hasTable(t, last.Netns) }
		for i, r := range recs[:len(recs)-1] {
			if err := b.store.Release(ctx, r.Attachment, ""); err != nil {
				t.Fatal(err)
			}
			if n := b.zt.dels(); n != 0 || b.hasTable(t, r.Netns) {
				t.Fatalf("after sandbox %d: ztunnel told Del %d times while the pod's new sandbox is enrolled, its table left %v",
					i+1, n, b.hasTable(t, r.Netns))
			}
			for _, ip := range ips[:i+1] {
				if held := slices.Contains(ips[i+1:], ip); b.hostHas(t, ip) != held {
					t.Fatalf("after sandbox %d: host probe set has %s %v, want %v (a live sandbox holds it)", i+1, ip, !held, held)
				}
			}
			for _, ip := range ips[i+1:] {
				if !b.hostHas(t, ip) {
					t.Fatalf("after sandbox %d: host probe set lost the live sandbox's %s", i+1, ip)
				}
			}
		}
		if err := b.store.Release(ctx, last.Attachment, ""); err != nil {
			t.Fatal(err)
		}
		if n := b.zt.dels(); n != 1 {
			t.Fatalf("ztunnel told Del %d times after the last attachment, want 1 (calls %v)", n, b.zt.calls)
		}
		if tableAtDel {
			t.Fatal("ztunnel was told Del while the pod's capture rules were still in place")
		}
		for _, ip := range ips {
			if b.hostHas(t, ip) {
				t.Fatalf("the last owner's release left %s in the host probe set", ip)
			}
		}
	}
}

// A stale record whose IP a new pod now has: dropping it (its DEL never
// came, its netns is gone) must not take the new pod's IP out of the host
// probe set, and the reconciler puts the IP back in a host table recreated
// empty. The reconciler walks records in order: the live one first, so its
// own re-assertion cannot mask the stale one's removal.
func probeIPKept(recreated bool) func(*testing.T, *testbed) {
	return func(t *testing.T, b *testbed) {
		ctx := context.Background()
		stale := b.ambientRecord(t, "zz-gone", "uid-old", "10.0.0.7/24")
		live := b.ambientRecord(t, "aa-live", "uid-new", "10.0.0.7/24")
		for _, r := range []Record{stale, live} {
			if err := b.store.Enroll(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if recreated {
			b.dropHostIP(t, "10.0.0.7")
		}
		b.delete(t, stale.Netns)
		if err := b.store.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if !b.hostHas(t, "10.0.0.7") || len(b.store.List()) != 1 {
			t.Fatalf("after reconcile: host has the live pod's IP %v, records %+v", b.hostHas(t, "10.0.0.7"), b.store.List())
		}
		if err := b.store.Release(ctx, live.Attachment, ""); err != nil {
			t.Fatal(err)
		}
		if b.hostHas(t, "10.0.0.7") {
			t.Fatal("the last owner's release left its IP in the host probe set")
		}
	}
}
