package workloads

import (
	"context"
	"errors"
	"testing"
	"time"

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

// A ztunnel that refuses fails the ADD with ErrZtunnel (the pod is then
// marked pending) and leaves nothing behind.
func TestZtunnelRefusalRollsBack(t *testing.T) {
	f := newAmbientFixture(t)
	f.zt.refuse = errors.New("no")
	ns := nstest.NewIn(t, f.root, "refused")
	err := f.store.Enroll(context.Background(), ambientRecord("refused", "eth0", "uid-r", "10.0.0.10/24", ns))
	if !errors.Is(err, ErrZtunnel) {
		t.Fatalf("Enroll with ztunnel refusing: %v, want ErrZtunnel", err)
	}
	if hasTable(t, ns) || f.hostHas(t, "10.0.0.10") || len(f.store.List()) != 0 || len(f.open(t).List()) != 0 {
		t.Fatal("a refused ambient ADD left state behind")
	}
}
