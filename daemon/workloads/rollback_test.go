package workloads

import (
	"context"
	"errors"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// A rollback restores exactly what was there before the call, never less,
// and ztunnel never hears Del while a redirect remains in the pod's netns.

// A re-ADD of an enrolled ambient pod that ztunnel refuses keeps the pod's
// capture, record and probe address as they were, and ztunnel's hold.
func TestUnitRefusedReAddKeepsTheCapture(t *testing.T) {
	u, zt := newAmbientUnit(t)
	ino := u.ns.Add("/netns/a")
	r := ambientUnitRecord("a", "uid-a", "10.0.0.1/24")
	if err := u.store.Enroll(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	before, _ := u.kernel.Table(ino)
	again := r
	again.Spec.CaptureDNS = !r.Spec.CaptureDNS // a ruleset of its own
	zt.refuse = errors.New("no")
	if err := u.store.Enroll(context.Background(), again); !errors.Is(err, ErrZtunnel) {
		t.Fatalf("re-ADD with ztunnel refusing: %v, want ErrZtunnel", err)
	}
	after, ok := u.kernel.Table(ino)
	if !ok || after.Hash() != before.Hash() {
		t.Fatalf("after the refused re-ADD the netns holds %v (table %v), want the ruleset it had", after, ok)
	}
	for name, s := range map[string]*Store{"store": u.store, "journal": u.open(t)} {
		got, ok := s.Get(r.Attachment)
		if !ok || got.RulesetHash != before.Hash() {
			t.Errorf("%s: record %+v (%v), want the earlier enrolment", name, got, ok)
		}
	}
	if zt.dels() != 0 || !u.hostHas("10.0.0.1") {
		t.Errorf("ztunnel dels %d, host has the probe address %v: want 0, true", zt.dels(), u.hostHas("10.0.0.1"))
	}
}

// A takeover hands the pod to ztunnel with this store's table in place and
// the other agent's rules not yet removed, and removes them only after.
func TestUnitTakeOverHandsOverBeforeRemovingTheirs(t *testing.T) {
	u, zt := newAmbientUnit(t)
	ino := u.ns.Add("/netns/t")
	r := ambientUnitRecord("t", "uid-t", "10.0.0.2/24")
	theirs, tableAtAdd, theirsAtAdd, addedAtRemove := true, false, false, false
	zt.onAdd = func() { tableAtAdd, theirsAtAdd = u.hasTable(ino), theirs }
	err := u.store.TakeOver(context.Background(), r, func(netns.NsHandle) error {
		addedAtRemove = len(zt.calls) == 1
		theirs = false
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !tableAtAdd || !theirsAtAdd || !addedAtRemove || theirs {
		t.Fatalf("at ztunnel's Add: our table %v, theirs %v; ztunnel held the pod at the removal %v; theirs left %v",
			tableAtAdd, theirsAtAdd, addedAtRemove, theirs)
	}
	if _, ok := u.open(t).Get(r.Attachment); !ok || !u.hasTable(ino) || !u.hostHas("10.0.0.2") {
		t.Fatal("a takeover left the pod unjournaled, without its table or its probe address")
	}
}

// A takeover ztunnel refuses, or whose removal of the other agent's rules
// fails, leaves those rules in place and none of ours, journals nothing,
// and never tells ztunnel Del: it still serves the pod for the other agent.
func TestUnitFailedTakeOverLeavesTheirs(t *testing.T) {
	for name, tc := range map[string]struct {
		refuse, remove error
	}{
		"ztunnel refuses": {refuse: errors.New("no")},
		"removal fails":   {remove: errors.New("EBUSY")},
	} {
		t.Run(name, func(t *testing.T) {
			u, zt := newAmbientUnit(t)
			ino := u.ns.Add("/netns/t")
			r := ambientUnitRecord("t", "uid-t", "10.0.0.3/24")
			zt.refuse = tc.refuse
			removed := 0
			err := u.store.TakeOver(context.Background(), r, func(netns.NsHandle) error {
				removed++
				return tc.remove
			})
			var rb RolledBack
			if !errors.As(err, &rb) {
				t.Fatalf("TakeOver = %v, want a rolled-back failure", err)
			}
			if tc.refuse != nil && removed != 0 {
				t.Error("the other agent's rules were removed although ztunnel refused the pod")
			}
			if u.hasTable(ino) || u.hostHas("10.0.0.3") || len(u.store.List()) != 0 || len(u.open(t).List()) != 0 {
				t.Error("a failed takeover left our table, the probe address or a record")
			}
			if zt.dels() != 0 {
				t.Error("ztunnel was told Del for a pod the other agent's rules still send to it")
			}
		})
	}
}

// A sibling attachment's table in a shared netns (Multus) is what a
// refused ADD of another attachment leaves there.
func TestUnitRefusedAddKeepsASiblingsTable(t *testing.T) {
	u, zt := newAmbientUnit(t)
	ino := u.ns.Add("/netns/shared")
	first := ambientUnitRecord("shared", "uid-s", "10.0.0.4/24")
	if err := u.store.Enroll(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	want, _ := u.kernel.Table(ino)
	second := first
	second.IfName = "net1"
	second.Spec = redirect.DefaultAmbientSpec()
	second.Spec.CaptureDNS = !first.Spec.CaptureDNS
	zt.refuse = errors.New("no")
	if err := u.store.Enroll(context.Background(), second); !errors.Is(err, ErrZtunnel) {
		t.Fatalf("Enroll = %v, want ErrZtunnel", err)
	}
	if got, ok := u.kernel.Table(ino); !ok || got.Hash() != want.Hash() {
		t.Fatal("the sibling's table is not what the shared netns holds after the refused ADD")
	}
	if zt.dels() != 0 || !u.hostHas("10.0.0.4") || len(u.store.List()) != 1 {
		t.Errorf("ztunnel dels %d, probe address %v, records %d; want 0, true, 1", zt.dels(), u.hostHas("10.0.0.4"), len(u.store.List()))
	}
}
