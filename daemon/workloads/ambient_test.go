package workloads

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// ztunnel's ack is awaited inside the call's deadline, less a reserve for
// the rollback and the answer: a late ztunnel is reported as ztunnel's
// failure, everything rolled back, before the caller gives up.
func TestZtunnelWaitFitsInsideTheCallDeadline(t *testing.T) {
	f := newAmbientFixture(t)
	ns := nstest.NewIn(t, f.root, "deadline")
	dl := time.Now().Add(time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	if err := f.store.Enroll(ctx, ambientRecord("deadline", "eth0", "uid-d", "10.0.0.9/24", ns)); err != nil {
		t.Fatal(err)
	}
	if want := dl.Add(-rollbackReserve); !f.zt.addDeadline.Equal(want) {
		t.Fatalf("ztunnel Add deadline %v, want the call's less %v (%v)", f.zt.addDeadline, rollbackReserve, want)
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
