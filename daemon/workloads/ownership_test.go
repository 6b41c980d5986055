package workloads

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// plantTable programs a sidecar table into ns that no record of ours owns:
// another pod's, as far as the store can know.
func plantTable(t *testing.T, ns *nstest.NS) {
	t.Helper()
	rs, err := redirect.Build(redirect.DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	h := ns.Handle(t)
	if _, err := (kernel.Netlink{}).Apply(redirect.Netns(h), rs); err != nil {
		t.Fatalf("plant table in %s: %v", ns.Name, err)
	}
}

// A DEL for an attachment the agent has no record of names a path that may
// by now be another pod's netns (or the shared netns of a Multus sibling):
// it touches no kernel state.
func TestReleaseWithoutRecordTouchesNothing(t *testing.T) {
	f := newFixture(t)
	ns := nstest.NewIn(t, f.root, "someone-else")
	plantTable(t, ns)
	a := Attachment{ContainerID: "unknown", IfName: "eth0"}
	if err := f.store.Release(context.Background(), a, ns.Path); err != nil {
		t.Fatal(err)
	}
	if !hasTable(t, ns) {
		t.Fatal("DEL of an unknown attachment removed the table of the netns it named")
	}
}

// Multus: eth0 and net1 of one sandbox are two attachments in one netns.
// The table stays until the last of them is released.
func TestSharedNetnsKeepsTableUntilLastRelease(t *testing.T) {
	f := newFixture(t)
	ns, eth0 := f.enroll(t, "multus")
	net1 := eth0
	net1.IfName = "net1"
	if err := f.store.Enroll(context.Background(), net1); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Release(context.Background(), net1.Attachment, ns.Path); err != nil {
		t.Fatal(err)
	}
	if !hasTable(t, ns) {
		t.Fatal("releasing net1 removed the table eth0 still needs")
	}
	if got := f.store.List(); len(got) != 1 || got[0].IfName != "eth0" {
		t.Fatalf("records after releasing net1: %+v", got)
	}
	if err := f.store.Release(context.Background(), eth0.Attachment, ns.Path); err != nil {
		t.Fatal(err)
	}
	if hasTable(t, ns) {
		t.Fatal("releasing the last attachment left the table")
	}
}

// Two different sandboxes whose paths name one netns (a hostile or broken
// runtime): releasing one must not strip the other.
func TestSharedNetnsAcrossContainers(t *testing.T) {
	f := newFixture(t)
	ns, _ := f.enroll(t, "first")
	second := Record{Attachment: Attachment{ContainerID: "second", IfName: "eth0"}, Netns: ns.Path, Spec: redirect.DefaultSpec()}
	if err := f.store.Enroll(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	if err := f.store.Release(context.Background(), Attachment{ContainerID: "first", IfName: "eth0"}, ns.Path); err != nil {
		t.Fatal(err)
	}
	if !hasTable(t, ns) {
		t.Fatal("releasing one container removed the table another one's record owns")
	}
}

// A record whose path now names another netns (pid reuse): DEL forgets the
// record and never touches the namespace behind the path.
func TestReleaseNeverTouchesAReusedPath(t *testing.T) {
	f := newFixture(t)
	ns, r := f.enroll(t, "reused")
	unix.Unmount(ns.Path, unix.MNT_DETACH)
	os.Remove(ns.Path)
	other := nstest.NewIn(t, f.root, "reused")
	plantTable(t, other)
	if err := f.store.Release(context.Background(), r.Attachment, other.Path); err != nil {
		t.Fatal(err)
	}
	if !hasTable(t, other) {
		t.Fatal("DEL removed the table of the netns now behind the enrolled path")
	}
	if len(f.store.List()) != 0 {
		t.Fatalf("record kept: %+v", f.store.List())
	}
}

// A re-ADD of one attachment into another netns moves it: the first netns
// must not keep a table nobody owns.
func TestReAddIntoAnotherNetnsCleansTheFirst(t *testing.T) {
	f := newFixture(t)
	first, r := f.enroll(t, "moved")
	second := nstest.NewIn(t, f.root, "moved-2")
	r.Netns = second.Path
	if err := f.store.Enroll(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if hasTable(t, first) {
		t.Fatal("re-ADD into another netns left the first netns's table orphaned")
	}
	if !hasTable(t, second) {
		t.Fatal("re-ADD did not program the new netns")
	}
	if err := f.store.Release(context.Background(), r.Attachment, ""); err != nil {
		t.Fatal(err)
	}
	if hasTable(t, second) {
		t.Fatal("Release after a move left the new netns's table")
	}
}

// A re-ADD whose apply fails keeps the earlier, working enrolment on disk:
// the journal must still name the table that is in the kernel.
func TestFailedReAddKeepsEarlierRecord(t *testing.T) {
	f := newFixture(t)
	_, r := f.enroll(t, "kept")
	bad := r
	bad.Netns = "/etc/passwd"
	if err := f.store.Enroll(context.Background(), bad); err == nil {
		t.Fatal("Enroll into /etc/passwd succeeded")
	}
	bad = r
	bad.Spec.OutboundPort = 0 // Build refuses it
	if err := f.store.Enroll(context.Background(), bad); err == nil {
		t.Fatal("Enroll of an invalid Spec succeeded")
	}
	got := f.open(t).List()
	if len(got) != 1 || got[0].Netns != r.Netns {
		t.Fatalf("journal after failed re-ADDs: %+v", got)
	}
}

// readOnly remounts dir read-only (a bind mount of itself) until the test
// ends, so removing a file in it fails the way a broken disk does.
func readOnly(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", dir, err)
	}
}

// A DEL whose journal delete fails has still removed the table: the record
// must not be reasserted by the next resync onto the released pod.
func TestReleaseWithFailingJournalIsNotReasserted(t *testing.T) {
	f := newFixture(t)
	ns, r := f.enroll(t, "stuck")
	readOnly(t, f.state)
	f.store.Release(context.Background(), r.Attachment, ns.Path) // the error is the journal's
	if hasTable(t, ns) {
		t.Fatal("Release left the table")
	}
	if err := f.store.Reconcile(context.Background()); err != nil {
		t.Logf("reconcile: %v", err)
	}
	if hasTable(t, ns) {
		t.Fatal("resync re-applied the ruleset of a released attachment")
	}
	if got := f.store.List(); len(got) != 0 {
		t.Fatalf("released attachment still listed: %+v", got)
	}
	// Once the disk works again the leftover record is deleted.
	unix.Unmount(f.state, unix.MNT_DETACH)
	if err := f.store.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.open(t).List(); len(got) != 0 {
		t.Fatalf("journal still holds the released attachment: %+v", got)
	}
}

// GC is scoped to the calling network: another network's GC, whatever its
// valid list, never releases this network's attachments.
func TestGCScopedToNetwork(t *testing.T) {
	f := newFixture(t)
	nsA := nstest.NewIn(t, f.root, "a")
	nsB := nstest.NewIn(t, f.root, "b")
	ra := Record{Attachment: Attachment{ContainerID: "a", IfName: "eth0"}, Network: "net-a", Netns: nsA.Path, Spec: redirect.DefaultSpec()}
	rb := Record{Attachment: Attachment{ContainerID: "b", IfName: "eth0"}, Network: "net-b", Netns: nsB.Path, Spec: redirect.DefaultSpec()}
	for _, r := range []Record{ra, rb} {
		if err := f.store.Enroll(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := f.store.GC(context.Background(), "other-net", nil)
	if err != nil || len(removed) != 0 {
		t.Fatalf("GC of other-net removed %v (%v)", removed, err)
	}
	removed, err = f.store.GC(context.Background(), "net-a", nil)
	if err != nil || len(removed) != 1 || removed[0] != ra.Attachment {
		t.Fatalf("GC of net-a removed %v (%v)", removed, err)
	}
	if hasTable(t, nsA) || !hasTable(t, nsB) {
		t.Fatal("GC of net-a touched the wrong netns")
	}
	if got := f.open(t).List(); len(got) != 1 || got[0].Network != "net-b" {
		t.Fatalf("journal after GC: %+v", got)
	}
}

// A record journaled before network names were kept cannot be proven to
// belong to the calling network: no GC releases it.
func TestGCLeavesRecordsWithoutNetwork(t *testing.T) {
	f := newFixture(t)
	ns := nstest.NewIn(t, f.root, "old")
	r := Record{Attachment: Attachment{ContainerID: "old", IfName: "eth0"}, Netns: ns.Path, Spec: redirect.DefaultSpec()}
	if err := f.store.Enroll(context.Background(), r); err != nil { // no Network, as an older agent wrote it
		t.Fatal(err)
	}
	removed, err := f.store.GC(context.Background(), "net-a", nil)
	if err != nil || len(removed) != 0 {
		t.Fatalf("GC removed %v (%v)", removed, err)
	}
	if !hasTable(t, ns) {
		t.Fatal("GC removed an unscoped record's table")
	}
}

// fakeZtunnel records what ztunnel was told: a seam fake, for the order of
// calls only.
type fakeZtunnel struct {
	mu     sync.Mutex
	calls  []string
	refuse error
	// onDel and onAdd run inside Del and Add, to look at the kernel at
	// that moment.
	onDel func()
	onAdd func()
	// addDeadline is the deadline the last Add was given.
	addDeadline time.Time
}

func (z *fakeZtunnel) Add(ctx context.Context, w ztunnel.Workload) error {
	if z.onAdd != nil {
		z.onAdd()
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.addDeadline, _ = ctx.Deadline()
	if z.refuse != nil {
		return z.refuse
	}
	z.calls = append(z.calls, "add "+w.UID)
	return nil
}

func (z *fakeZtunnel) Del(_ context.Context, uid string) error {
	if z.onDel != nil {
		z.onDel()
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.calls = append(z.calls, "del "+uid)
	return nil
}

// AwaitConnection finds the fake connected.
func (z *fakeZtunnel) AwaitConnection(context.Context, ztunnel.Workload) error { return nil }

func (z *fakeZtunnel) dels() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	n := 0
	for _, c := range z.calls {
		if strings.HasPrefix(c, "del ") {
			n++
		}
	}
	return n
}

type ambientFixture struct {
	*fixture
	host *nstest.NS
	zt   *fakeZtunnel
}

func newAmbientFixture(t *testing.T) *ambientFixture {
	t.Helper()
	f := newFixture(t)
	host := nstest.New(t, "host")
	h := host.Handle(t)
	if err := (kernel.Netlink{}).EnsureHostTable(redirect.Netns(h), redirect.DefaultHostConfig()); err != nil {
		t.Fatal(err)
	}
	zt := &fakeZtunnel{}
	f.ambient = &Ambient{Ztunnel: zt, Host: h}
	f.store = f.open(t)
	return &ambientFixture{fixture: f, host: host, zt: zt}
}

func ambientRecord(id, ifName, uid, ip string, ns *nstest.NS) Record {
	return Record{Attachment: Attachment{ContainerID: id, IfName: ifName}, PodUID: uid, PodName: "p-" + uid,
		PodNamespace: "default", Netns: ns.Path, IPs: []netip.Prefix{netip.MustParsePrefix(ip)}, Spec: redirect.DefaultAmbientSpec()}
}

func (f *ambientFixture) hostHas(t *testing.T, ip string) bool {
	t.Helper()
	out := f.host.Run(t, "nft", "list", "table", "inet", redirect.HostTableName)
	return slices.ContainsFunc(strings.Fields(out), func(w string) bool { return strings.Trim(w, "{},") == ip })
}

// ztunnel hears Del(uid) only when the pod's last attachment goes: a
// recreated sandbox of the same pod keeps its proxy.
func TestZtunnelDelOnlyForLastAttachmentOfPod(t *testing.T) {
	f := newAmbientFixture(t)
	old := nstest.NewIn(t, f.root, "sandbox-1")
	fresh := nstest.NewIn(t, f.root, "sandbox-2")
	r1 := ambientRecord("sandbox-1", "eth0", "uid-1", "10.0.0.5/24", old)
	r2 := ambientRecord("sandbox-2", "eth0", "uid-1", "10.0.0.6/24", fresh)
	for _, r := range []Record{r1, r2} {
		if err := f.store.Enroll(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.store.Release(context.Background(), r1.Attachment, ""); err != nil {
		t.Fatal(err)
	}
	if n := f.zt.dels(); n != 0 {
		t.Fatalf("ztunnel told Del %d times while the pod's new sandbox is enrolled", n)
	}
	if f.hostHas(t, "10.0.0.5") || !f.hostHas(t, "10.0.0.6") {
		t.Fatal("host probe set lost the live sandbox's IP or kept the released one's")
	}
	if err := f.store.Release(context.Background(), r2.Attachment, ""); err != nil {
		t.Fatal(err)
	}
	if n := f.zt.dels(); n != 1 {
		t.Fatalf("ztunnel told Del %d times after the last attachment, want 1", n)
	}
}

// A stale record whose IP a new pod now has must not take the new pod's IP
// out of the host probe set.
func TestProbeSetRemovalKeepsReusedIP(t *testing.T) {
	f := newAmbientFixture(t)
	// The reconciler walks records in order: the live one first, so its
	// own re-assertion cannot mask the stale one's removal.
	gone := nstest.NewIn(t, f.root, "zz-gone")
	live := nstest.NewIn(t, f.root, "aa-live")
	stale := ambientRecord("zz-gone", "eth0", "uid-old", "10.0.0.7/24", gone)
	fresh := ambientRecord("aa-live", "eth0", "uid-new", "10.0.0.7/24", live)
	for _, r := range []Record{stale, fresh} {
		if err := f.store.Enroll(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	// The old pod's DEL never came; its netns is gone; the reconciler drops it.
	unix.Unmount(gone.Path, unix.MNT_DETACH)
	os.Remove(gone.Path)
	if err := f.store.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !f.hostHas(t, "10.0.0.7") {
		t.Fatal("dropping the stale pod removed the new pod's IP from the host probe set")
	}
	if err := f.store.Release(context.Background(), fresh.Attachment, ""); err != nil {
		t.Fatal(err)
	}
	if f.hostHas(t, "10.0.0.7") {
		t.Fatal("the last owner's release left its IP in the host probe set")
	}
}

// Istio's order on unenrolment: the in-pod rules go before ztunnel lets go
// of the pod, so there is no moment with capture and no proxy.
func TestReleaseRemovesRulesBeforeTellingZtunnel(t *testing.T) {
	f := newAmbientFixture(t)
	ns := nstest.NewIn(t, f.root, "order")
	r := ambientRecord("order", "eth0", "uid-o", "10.0.0.8/24", ns)
	if err := f.store.Enroll(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	tableAtDel := true
	f.zt.onDel = func() { tableAtDel = hasTable(t, ns) }
	if err := f.store.Release(context.Background(), r.Attachment, ""); err != nil {
		t.Fatal(err)
	}
	if f.zt.dels() != 1 {
		t.Fatalf("ztunnel calls: %v", f.zt.calls)
	}
	if tableAtDel {
		t.Fatal("ztunnel was told Del while the pod's capture rules were still in place")
	}
}
