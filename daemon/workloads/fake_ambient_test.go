package workloads

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
)

// The ambient half of the Store's logic over redirecttest (fake_test.go):
// the host probe table, ztunnel's hold and the wait for it. The ambient
// rows of scenarios_test.go run on this and on the real kernel.

// newAmbientUnit is newUnit with ztunnel and a host netns.
func newAmbientUnit(t *testing.T) (*unit, *fakeZtunnel) {
	t.Helper()
	zt := &fakeZtunnel{}
	return newAmbientUnitWith(t, zt), zt
}

// newAmbientUnitWith is newAmbientUnit with zt as ztunnel.
func newAmbientUnitWith(t *testing.T, zt interface {
	Add(ctx context.Context, w ztunnel.Workload) error
	Del(ctx context.Context, uid string) error
	AwaitConnection(ctx context.Context, w ztunnel.Workload) error
}) *unit {
	t.Helper()
	u := newUnitBare(t)
	u.hostIno = u.ns.Add("/host")
	host, err := u.ns.Open("/host")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	u.ambient = &Ambient{Ztunnel: zt, Host: host}
	u.store = u.open(t)
	return u
}

func ambientUnitRecord(id, uid, ip string) Record {
	return Record{Attachment: Attachment{ContainerID: id, IfName: "eth0"}, PodUID: uid, PodName: "p-" + uid,
		PodNamespace: "default", Netns: "/netns/" + id, IPs: []netip.Prefix{netip.MustParsePrefix(ip)}, Spec: redirect.DefaultAmbientSpec()}
}

func (u *unit) hostHas(ip string) bool {
	return slices.Contains(u.kernel.HostIPs(u.hostIno), netip.MustParseAddr(ip))
}

func TestUnitAmbientWithoutAmbientIsRefused(t *testing.T) {
	u := newUnit(t)
	ino := u.ns.Add("/netns/a")
	if err := u.store.Enroll(context.Background(), ambientUnitRecord("a", "uid-a", "10.0.0.1/24")); err == nil {
		t.Fatal("ambient Enroll without --ambient succeeded")
	}
	if u.hasTable(ino) || len(u.open(t).List()) != 0 {
		t.Fatal("a refused ambient Enroll left state")
	}
}

func TestUnitZtunnelSnapshotOnePerPod(t *testing.T) {
	u, _ := newAmbientUnit(t)
	u.ns.Add("/netns/s1")
	u.ns.Add("/netns/s2")
	u.ns.Add("/netns/s3")
	for _, r := range []Record{ambientUnitRecord("s1", "uid-1", "10.0.0.1/24"), ambientUnitRecord("s2", "uid-1", "10.0.0.2/24"),
		ambientUnitRecord("s3", "uid-3", "10.0.0.3/24")} {
		if err := u.store.Enroll(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if got := u.store.ZtunnelSnapshot(); len(got) != 2 {
		t.Fatalf("snapshot %+v, want one entry per pod", got)
	}
}

// ztunnel is given, for each pod, a path that names the pod's netns now:
// where it lives after its first path died, and none (ztunnel keeps what
// it holds) when the path has come to name another pod's netns and the
// pod's own is gone. Never the other pod's.
func TestUnitZtunnelSnapshotNamesTheEnrolledNetns(t *testing.T) {
	u, _ := newAmbientUnit(t)
	u.ns.Add("/proc/10/ns/net")
	u.ns.Add("/proc/20/ns/net")
	moved := ambientUnitRecord("moved", "uid-m", "10.0.0.1/24")
	moved.Netns = "/proc/10/ns/net"
	reused := ambientUnitRecord("reused", "uid-r", "10.0.0.2/24")
	reused.Netns = "/proc/20/ns/net"
	for _, r := range []Record{moved, reused} {
		if err := u.store.Enroll(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	u.ns.Alias(moved.Netns, "/proc/11/ns/net") // a second process of the pod
	u.ns.Delete(moved.Netns)                   // the first exits
	u.ns.Replace(reused.Netns)                 // pid reuse: another pod's netns
	got := map[string]string{}
	for _, w := range u.store.ZtunnelSnapshot() {
		got[w.UID] = w.Netns
	}
	if got["uid-m"] != "/proc/11/ns/net" || got["uid-r"] != "" || len(got) != 2 {
		t.Fatalf("snapshot netns paths %v, want uid-m at /proc/11/ns/net and uid-r at none", got)
	}
}

// waitingZtunnel is fakeZtunnel whose AwaitConnection, for the pod uid
// blocked, signals waiting and blocks until release is closed.
type waitingZtunnel struct {
	*fakeZtunnel
	blocked          string
	waiting, release chan struct{}
}

func (z *waitingZtunnel) AwaitConnection(_ context.Context, w ztunnel.Workload) error {
	if w.UID == z.blocked {
		close(z.waiting)
		<-z.release
	}
	return nil
}

// An ambient ADD waiting for ztunnel holds no pod lock: the DEL of another
// ambient pod whose uid falls on the same lock stripe finishes meanwhile
// (DEL never waits on a ztunnel that is away), and the ADD goes on once
// ztunnel is there.
func TestUnitZtunnelWaitHoldsNoPodLock(t *testing.T) {
	stripe := func(uid string) uint32 { h := fnv.New32a(); h.Write([]byte(uid)); return h.Sum32() % 64 }
	other := "uid-0"
	for i := 1; stripe(other) != stripe("uid-b"); i++ {
		other = fmt.Sprintf("uid-%d", i)
	}
	zt := &waitingZtunnel{fakeZtunnel: &fakeZtunnel{}, blocked: other, waiting: make(chan struct{}), release: make(chan struct{})}
	u := newAmbientUnitWith(t, zt)

	u.ns.Add("/netns/b")
	rb := ambientUnitRecord("b", "uid-b", "10.0.0.2/24")
	if err := u.store.Enroll(context.Background(), rb); err != nil {
		t.Fatal(err)
	}
	u.ns.Add("/netns/a")
	added := make(chan error, 1)
	go func() {
		added <- u.store.EnrollAmbient(context.Background(), ambientUnitRecord("a", other, "10.0.0.1/24"), true)
	}()
	<-zt.waiting
	released := make(chan error, 1)
	go func() { released <- u.store.Release(context.Background(), rb.Attachment, "") }()
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("DEL of b: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DEL of b blocked behind the ADD waiting for ztunnel")
	}
	close(zt.release)
	if err := <-added; err != nil {
		t.Fatalf("ADD after the wait: %v", err)
	}
	if got := zt.calls; !slices.Equal(got, []string{"add uid-b", "del uid-b", "add " + other}) {
		t.Errorf("ztunnel heard %v", got)
	}
}

// An ambient ADD waiting for ztunnel holds no attachment lock either: the
// DEL of another container and a sidecar ADD of a third, both on the
// waiting container's stripe, finish meanwhile. With the wait inside
// Enroll's attachment lock, both waited for ztunnel (a DEL took 4.3 s
// behind a 5 s wait).
func TestUnitZtunnelWaitHoldsNoAttachmentLock(t *testing.T) {
	stripe := func(id string) uint32 { h := fnv.New32a(); h.Write([]byte(id)); return h.Sum32() % 64 }
	var same []string
	for i := 0; len(same) < 2; i++ {
		if id := fmt.Sprintf("c%d", i); id != "a" && stripe(id) == stripe("a") {
			same = append(same, id)
		}
	}
	zt := &waitingZtunnel{fakeZtunnel: &fakeZtunnel{}, blocked: "uid-a", waiting: make(chan struct{}), release: make(chan struct{})}
	u := newAmbientUnitWith(t, zt)
	deleted, sidecar := same[0], same[1]
	u.ns.Add("/netns/" + deleted)
	rd := ambientUnitRecord(deleted, "uid-"+deleted, "10.0.0.2/24")
	if err := u.store.Enroll(context.Background(), rd); err != nil {
		t.Fatal(err)
	}
	u.ns.Add("/netns/a")
	added := make(chan error, 1)
	go func() {
		added <- u.store.EnrollAmbient(context.Background(), ambientUnitRecord("a", "uid-a", "10.0.0.1/24"), true)
	}()
	<-zt.waiting
	done := make(chan error, 2)
	go func() { done <- u.store.Release(context.Background(), rd.Attachment, "") }()
	u.ns.Add("/netns/" + sidecar)
	rs := ambientUnitRecord(sidecar, "uid-"+sidecar, "10.0.0.3/24")
	rs.Spec = redirect.DefaultSpec()
	go func() { done <- u.store.Enroll(context.Background(), rs) }()
	for _, what := range []string{"one", "the other"} {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("DEL of %s or sidecar ADD of %s: %v", deleted, sidecar, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s of the DEL of %s and the sidecar ADD of %s blocked behind the ADD of a waiting for ztunnel (same stripe)", what, deleted, sidecar)
		}
	}
	close(zt.release)
	if err := <-added; err != nil {
		t.Fatalf("ADD after the wait: %v", err)
	}
}

// deadOnceZtunnel's first Add finds the connection dead (what a ztunnel
// that died unnoticed gives: no ztunnel connected); it counts the waits.
type deadOnceZtunnel struct {
	*fakeZtunnel
	adds, waits int
}

func (z *deadOnceZtunnel) Add(ctx context.Context, w ztunnel.Workload) error {
	if z.adds++; z.adds == 1 {
		return fmt.Errorf("write to ztunnel: %w: broken pipe", ztunnel.ErrNotConnected)
	}
	return z.fakeZtunnel.Add(ctx, w)
}

func (z *deadOnceZtunnel) AwaitConnection(context.Context, ztunnel.Workload) error {
	z.waits++
	return nil
}

// An ambient ADD whose hand-over meets a ztunnel that died unnoticed rolls
// back, waits for a ztunnel again (outside every lock, as before its first
// try) and hands the pod over once more: the first ADD after a ztunnel
// crash does not fail while the restarted ztunnel is on its way.
func TestUnitDeadZtunnelConnectionGoesBackToWaiting(t *testing.T) {
	zt := &deadOnceZtunnel{fakeZtunnel: &fakeZtunnel{}}
	u := newAmbientUnitWith(t, zt)
	ino := u.ns.Add("/netns/a")
	if err := u.store.EnrollAmbient(context.Background(), ambientUnitRecord("a", "uid-a", "10.0.0.1/24"), true); err != nil {
		t.Fatalf("ADD after a dead connection: %v", err)
	}
	if zt.adds != 2 || zt.waits != 2 {
		t.Fatalf("%d Adds and %d waits, want 2 and 2", zt.adds, zt.waits)
	}
	if !u.hasTable(ino) || !u.hostHas("10.0.0.1") {
		t.Fatal("the pod is not captured after the second hand-over")
	}
}

// Only the ADD's enrolment waits for ztunnel: a background one (late
// enrolment, repair) never asks for a connection, so it cannot hold one of
// the waiting slots, and a dead connection fails it for its work queue to
// retry.
func TestUnitBackgroundEnrolmentDoesNotWait(t *testing.T) {
	zt := &deadOnceZtunnel{fakeZtunnel: &fakeZtunnel{}}
	u := newAmbientUnitWith(t, zt)
	ino := u.ns.Add("/netns/a")
	err := u.store.Enroll(context.Background(), ambientUnitRecord("a", "uid-a", "10.0.0.1/24"))
	if !errors.Is(err, ErrZtunnel) || zt.waits != 0 || zt.adds != 1 {
		t.Fatalf("background enrolment on a dead connection: %v after %d waits and %d Adds, want ErrZtunnel after 0 and 1", err, zt.waits, zt.adds)
	}
	if u.hasTable(ino) {
		t.Fatal("the failed background enrolment left its table")
	}
}
