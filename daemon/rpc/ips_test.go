package rpc

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/policy"
)

func ipConfigs(addrs ...string) []*sluicev1.IPConfig {
	var out []*sluicev1.IPConfig
	for _, a := range addrs {
		out = append(out, &sluicev1.IPConfig{Address: a})
	}
	return out
}

// A CNI result gives prefixes, NRI bare addresses: both are the pod's, and
// each is kept as a prefix (a bare address as a host prefix).
func TestParseIPsAcceptsPrefixesAndAddresses(t *testing.T) {
	got, err := parseIPs(ipConfigs("10.1.0.2/24", "fd00::2/64", "10.89.0.5", "fd00::5"))
	want := []netip.Prefix{netip.MustParsePrefix("10.1.0.2/24"), netip.MustParsePrefix("fd00::2/64"),
		netip.MustParsePrefix("10.89.0.5/32"), netip.MustParsePrefix("fd00::5/128")}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("parseIPs = %v, %v; want %v", got, err, want)
	}
}

// A value that is no address refuses the call and is named: left out, the
// pod would miss the ambient probe SNAT set and its family's capture.
func TestParseIPsRefusesGarbage(t *testing.T) {
	for _, bad := range []string{"garbage", "", "10.1.0.300/24", "10.1.0.2/33", "fe80::1%eth0", "10.1.0.2/24 "} {
		_, err := parseIPs(ipConfigs("10.1.0.2/24", bad))
		if err == nil || !strings.Contains(err.Error(), "ips[1].address") || !strings.Contains(err.Error(), bad) {
			t.Errorf("parseIPs(%q) = %v, want an error naming ips[1] and the value", bad, err)
		}
	}
}

// Policy decides the IP families from the pod's addresses, as Istio does:
// the ones prevResult gave must reach it.
func TestPodOfCarriesIPs(t *testing.T) {
	ips, _ := parseIPs(ipConfigs("10.1.0.2/24", "fd00::2/64", "fd00::3"))
	p := podOf(&sluicev1.PodRef{Namespace: "ns", Name: "a", Uid: "u"}, ips)
	want := []netip.Addr{netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00::3")}
	if p.Namespace != "ns" || p.Name != "a" || p.UID != "u" || !slices.Equal(p.IPs, want) {
		t.Errorf("podOf = %+v, want ns/a uid u with %v", p, want)
	}
}

// ADD and CHECK refuse a bad address as the caller's fault, naming it and
// the request, before policy runs or anything is enrolled.
func TestUnitBadIPRefused(t *testing.T) {
	u := newUnit(t, nil)
	u.cni.Policy = policyFunc(func(policy.Pod) (policy.Decision, error) {
		t.Error("policy ran for a request with a bad IP")
		return policy.Decision{}, nil
	})
	ino := u.ns.Add("/netns/c1")
	req := addReq("c1")
	req.Ips = ipConfigs("10.1.0.2/24", "10.1.0.x")
	req.RequestId = "r-1"
	_, err := u.cni.Add(context.Background(), req)
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"10.1.0.x"`) || !strings.Contains(err.Error(), "r-1") {
		t.Fatalf("ADD with a bad IP: %v, want InvalidArgument naming \"10.1.0.x\" and the request id", err)
	}
	if u.hasTable(ino) || len(u.store.List()) != 0 {
		t.Fatal("a refused ADD left state")
	}
	_, err = u.cni.Check(context.Background(), &sluicev1.CheckRequest{ApiVersion: apiVersion, ContainerId: "c1",
		IfName: "eth0", Netns: "/netns/c1", Pod: req.Pod, Ips: req.Ips})
	if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"10.1.0.x"`) {
		t.Fatalf("CHECK with a bad IP: %v, want InvalidArgument naming \"10.1.0.x\"", err)
	}
}
