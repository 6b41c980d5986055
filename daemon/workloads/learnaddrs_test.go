package workloads

import (
	"context"
	"net/netip"
	"testing"
)

// An ambient pod ADDed without IPs is not in the host probe table, so its
// kubelet probes would fail: the addresses its status lists later are
// added, journaled (a restarted agent keeps them), and removed with the
// pod. An attachment the runtime gave IPs keeps its own.
func TestUnitAmbientLearnsAddrsFromStatus(t *testing.T) {
	u, _ := newAmbientUnit(t)
	u.ns.Add("/netns/bare")
	u.ns.Add("/netns/given")
	bare := ambientUnitRecord("bare", "uid-b", "10.0.0.1/24")
	bare.IPs = nil
	given := ambientUnitRecord("given", "uid-g", "10.0.0.2/24")
	for _, r := range []Record{bare, given} {
		if err := u.store.Enroll(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	status := []netip.Addr{netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("fd00::7")}
	if err := u.store.LearnAddrs("uid-b", status); err != nil {
		t.Fatal(err)
	}
	if err := u.store.LearnAddrs("uid-g", []netip.Addr{netip.MustParseAddr("10.0.0.99")}); err != nil {
		t.Fatal(err)
	}
	if !u.hostHas("10.0.0.7") || !u.hostHas("fd00::7") {
		t.Fatalf("host probe table %v: want the status's 10.0.0.7 and fd00::7", u.kernel.HostIPs(u.hostIno))
	}
	if u.hostHas("10.0.0.99") {
		t.Error("an attachment with the runtime's IPs took the status's")
	}
	reopened := u.open(t)
	if r, ok := reopened.Get(bare.Attachment); !ok || len(r.IPs) != 2 {
		t.Errorf("journal after a restart: %+v, want the learned IPs", r)
	}
	if err := u.store.Release(context.Background(), bare.Attachment, bare.Netns); err != nil {
		t.Fatal(err)
	}
	if u.hostHas("10.0.0.7") || u.hostHas("fd00::7") {
		t.Errorf("released pod's learned addresses stayed in the host table: %v", u.kernel.HostIPs(u.hostIno))
	}
}
