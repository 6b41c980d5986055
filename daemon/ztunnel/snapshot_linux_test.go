package ztunnel

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

func TestSnapshotHandsEachNetnsToZtunnel(t *testing.T) {
	h := start(t, nil)
	a, inoA := h.enroll("a")
	_, inoB := h.enroll("b")
	h.enrollGone("c")
	if ok, _ := h.srv.Ready(); ok {
		t.Fatal("ready before any ztunnel connected")
	}

	z := connectZtunnel(t, h.path)
	first := z.recv()
	if first.String() != "add:a" || first.netns != inoA {
		t.Fatalf("first request %s with netns %d, want add:a with %d", first, first.netns, inoA)
	}
	info := first.GetAdd().GetWorkloadInfo()
	if info.GetName() != a.Name || info.GetNamespace() != a.Namespace || info.GetServiceAccount() != a.ServiceAccount {
		t.Errorf("workload info %v, want %+v", info, a)
	}
	z.ack("")
	if r := z.recv(); r.String() != "add:b" || r.netns != inoB {
		t.Fatalf("second request %s with netns %d, want add:b with %d", r, r.netns, inoB)
	}
	z.ack("")
	if r := z.recv(); r.String() != "keep:c" {
		t.Fatalf("third request %s, want keep:c for the netns that cannot be opened", r)
	}
	z.ack("")
	if r := z.recv(); r.String() != "snapshot_sent" {
		t.Fatalf("fourth request %s, want snapshot_sent", r)
	}
	if ok, why := h.srv.Ready(); ok {
		t.Fatal("ready before the snapshot was acked")
	} else {
		t.Logf("not ready, as expected: %s", why)
	}
	z.ack("")
	nstest.Eventually(t, 5*time.Second, func() bool { ok, _ := h.srv.Ready(); return ok }, "not ready after the snapshot was acked")
}

// ztunnel's refusal of one workload does not stop the others.
func TestSnapshotGoesOnPastARefusedWorkload(t *testing.T) {
	h := start(t, nil)
	h.enroll("a")
	h.enroll("b")
	z := connectZtunnel(t, h.path)
	z.recv()
	z.ack("cannot set up proxy")
	if got := kinds(z.snapshot()); !slices.Equal(got, []string{"add:b", "snapshot_sent"}) {
		t.Fatalf("rest of snapshot %v", got)
	}
	h.connected(1)
}

func TestZtunnelReconnectingMidSnapshotGetsItAllAgain(t *testing.T) {
	h := start(t, nil)
	h.enroll("a")
	h.enroll("b")

	z1 := connectZtunnel(t, h.path)
	if r := z1.recv(); r.String() != "add:a" {
		t.Fatalf("first request %s", r)
	}
	z1.uc.Close() // ztunnel restarts before acking
	h.connected(0)

	z2 := connectZtunnel(t, h.path)
	if got := kinds(z2.snapshot()); !slices.Equal(got, []string{"add:a", "add:b", "snapshot_sent"}) {
		t.Fatalf("snapshot after reconnect %v", got)
	}
	h.connected(1)
}

// A workload enrolled while a snapshot is being sent reaches ztunnel after
// it, never interleaved with it.
func TestAddWaitsBehindSnapshot(t *testing.T) {
	h := start(t, nil)
	h.enroll("a")
	late, inoLate := h.pod("late")

	z := connectZtunnel(t, h.path)
	if r := z.recv(); r.String() != "add:a" {
		t.Fatalf("first request %s", r)
	}
	h.connected(1)
	errc := h.add(context.Background(), late)
	z.ack("")
	if r := z.recv(); r.String() != "snapshot_sent" {
		t.Fatalf("after add:a got %s, want snapshot_sent", r)
	}
	z.ack("")
	r := z.recv()
	if r.String() != "add:late" || r.netns != inoLate {
		t.Fatalf("after the snapshot got %s with netns %d, want add:late with %d", r, r.netns, inoLate)
	}
	z.ack("")
	if err := <-errc; err != nil {
		t.Fatalf("Add: %v", err)
	}
}
