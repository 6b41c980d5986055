package rpc

import (
	"net/netip"
	"slices"
	"testing"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// Policy decides the IP families from the pod's addresses, as Istio does:
// the ones prevResult gave must reach it.
func TestPodOfCarriesIPs(t *testing.T) {
	p := podOf(&sluicev1.PodRef{Namespace: "ns", Name: "a", Uid: "u"}, []*sluicev1.IPConfig{
		{Address: "10.1.0.2/24"}, {Address: "fd00::2/64"}, {Address: "fd00::3"}, {Address: "garbage"},
	})
	want := []netip.Addr{netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00::3")}
	if p.Namespace != "ns" || p.Name != "a" || p.UID != "u" || !slices.Equal(p.IPs, want) {
		t.Errorf("podOf = %+v, want ns/a uid u with %v", p, want)
	}
}
