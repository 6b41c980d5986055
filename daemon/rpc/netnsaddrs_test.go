package rpc

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// An ADD with no IPs (an own conflist under Multus: no prevResult) for a
// dual-stack sidecar pod whose status has no IPs yet: the families come
// from the addresses in the pod's netns, as istio-iptables reads them, so
// IPv6 is left alone without ISTIO_DUAL_STACK (its proxy listens on IPv4
// only). Before, both families were captured and every IPv6 connection of
// the pod was refused.
func TestAddWithoutIPsReadsTheNetns(t *testing.T) {
	f := newCNIFixture(t, t.TempDir())
	o, err := podns.NewOpener([]string{f.root}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	f.cni.Addrs = o
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a", Annotations: map[string]string{"sidecar.istio.io/status": "{}"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"},
			{Name: "istio-proxy", Args: []string{"proxy", "sidecar"}}}},
	}
	var seen []netip.Addr
	f.cni.Policy = policyFunc(func(p policy.Pod) (policy.Decision, error) {
		seen = p.IPs
		return policy.Rules{Sidecar: redirect.DefaultSpec()}.Decide(pod, nil, p.IPs)
	})
	ns, peer := nstest.NewIn(t, f.root, "c1"), nstest.New(t, "peer")
	nstest.Veth(t, ns, "eth0", []string{"10.0.0.5/24", "fd00::5/64"}, peer, "eth0", []string{"10.0.0.6/24", "fd00::6/64"})
	_, err = f.cni.Add(context.Background(), &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2,
		ContainerId: "c1", Netns: ns.Path, IfName: "eth0", Pod: &sluicev1.PodRef{Namespace: "shop", Name: "a", Uid: "u1"},
		Config: &sluicev1.PluginConfig{NetworkName: "net-a"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5")}
	if !slices.Equal(seen, want) {
		t.Errorf("policy saw the pod's IPs as %v, want the netns's %v", seen, want)
	}
	recs := f.store.List()
	if len(recs) != 1 {
		t.Fatalf("records: %v", recs)
	}
	if r := recs[0]; !r.Spec.IPv4 || r.Spec.IPv6 {
		t.Errorf("enrolled IPv4 %v IPv6 %v, want IPv4 only (no ISTIO_DUAL_STACK)", r.Spec.IPv4, r.Spec.IPv6)
	}
	wantPrefixes := []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24"), netip.MustParsePrefix("fd00::5/64")}
	if got := recs[0].IPs; !slices.Equal(got, wantPrefixes) {
		t.Errorf("record IPs %v, want %v (the ambient probe set is fed from them)", got, wantPrefixes)
	}
}
