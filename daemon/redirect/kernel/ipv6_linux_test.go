package kernel

import (
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

func loHas6(t *testing.T, ns *nstest.NS) (present bool, line string) {
	t.Helper()
	for _, l := range strings.Split(ns.Run(t, "ip", "-6", "addr", "show", "dev", "lo"), "\n") {
		if strings.Contains(l, "inet6 ::6/128") {
			return true, l
		}
	}
	return false, ""
}

// TestPassthroughAddress: an IPv6 sidecar gets ::6/128 on lo (Envoy's
// inbound passthrough binds it); Remove takes it away only if sluice
// added it, and Verify notices it missing.
func TestPassthroughAddress(t *testing.T) {
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	r, err := redirect.Build(redirect.DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	if err := applyIn(h, r); err != nil {
		t.Fatal(err)
	}
	if ok, _ := loHas6(t, ns); !ok {
		t.Fatalf("no ::6 on lo after Apply:\n%s", ns.Run(t, "ip", "-6", "addr", "show", "dev", "lo"))
	}
	if err := applyIn(h, r); err != nil {
		t.Fatalf("second Apply with ::6 present: %v", err)
	}
	ns.Run(t, "ip", "-6", "addr", "del", "::6/128", "dev", "lo")
	if drift, err := verifyIn(h, r); err != nil || !strings.Contains(strings.Join(drift, "\n"), "address ::6/128 on lo is missing") {
		t.Errorf("Verify without ::6: %q, %v", drift, err)
	}
	if err := applyIn(h, r); err != nil {
		t.Fatal(err)
	}
	if drift, err := verifyIn(h, r); err != nil || len(drift) > 0 {
		t.Errorf("Verify after re-Apply: %q, %v", drift, err)
	}

	// IPv4 only, or ambient: not wanted, so pruned.
	v4 := redirect.DefaultSpec()
	v4.IPv6 = false
	mustApplyNS(t, ns, v4)
	if ok, _ := loHas6(t, ns); ok {
		t.Errorf("::6 outlived the IPv6 capture")
	}
	mustApplyNS(t, ns, redirect.DefaultSpec())
	if err := removeIn(h); err != nil {
		t.Fatal(err)
	}
	if ok, line := loHas6(t, ns); ok {
		t.Errorf("::6 added by Apply outlived Remove: %s", line)
	}

	// One the pod had before is the pod's: Apply leaves it, Remove too.
	ns.Run(t, "ip", "-6", "addr", "add", "::6/128", "dev", "lo")
	mustApplyNS(t, ns, redirect.DefaultSpec())
	if err := removeIn(h); err != nil {
		t.Fatal(err)
	}
	if ok, _ := loHas6(t, ns); !ok {
		t.Errorf("Remove deleted a ::6 sluice did not add")
	}
}

func mustApplyNS(t *testing.T, ns *nstest.NS, s redirect.Spec) *redirect.Ruleset {
	t.Helper()
	r, err := redirect.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := applyIn(ns.Handle(t), r); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return r
}

// TestLoopbackIPv6Disabled: with IPv6 off on the pod's lo (its own sysctl,
// or all), every mode still captures IPv4, and Verify is clean; an
// IPv6-only Spec is refused rather than applied without capture.
func TestLoopbackIPv6Disabled(t *testing.T) {
	tproxy := redirect.DefaultSpec()
	tproxy.Interception = redirect.InterceptTProxy
	for _, sysctl := range []string{"lo", "all"} {
		for _, tc := range []struct {
			name string
			spec redirect.Spec
			in   string
		}{
			{"sidecar", redirect.DefaultSpec(), "proxy-in " + podV4 + ":8080"},
			{"tproxy", tproxy, "proxy-in " + podV4 + ":8080"},
			{"ambient", redirect.DefaultAmbientSpec(), "proxy-in " + podV4 + ":8080"},
		} {
			t.Run(sysctl+"/"+tc.name, func(t *testing.T) {
				tp := newTopology(t)
				tp.pod.Run(t, "sysctl", "-qw", "net.ipv6.conf."+sysctl+".disable_ipv6=1")
				r := mustApply(t, tp, tc.spec)
				if drift, err := verifyIn(tp.pod.Handle(t), r); err != nil || len(drift) > 0 {
					t.Errorf("Verify: %q, %v", drift, err)
				}
				if tc.in != "" {
					expect(t, "outbound v4", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "proxy-out 10.96.0.10:80")
					expect(t, "inbound v4", dialFrom(t, tp.node, "tcp", podV4+":8080"), tc.in)
				}
				v6 := tc.spec
				v6.IPv4 = false
				r6, err := redirect.Build(v6)
				if err != nil {
					t.Fatal(err)
				}
				if err := applyIn(tp.pod.Handle(t), r6); err == nil || !strings.Contains(err.Error(), "IPv6 disabled") {
					t.Errorf("IPv6-only Apply with lo's IPv6 off: %v, want a refusal", err)
				}
			})
		}
	}
}

// newIPv6OnlyTopology is newTopology for a pod and node with no IPv4
// address at all: the proxy's listeners and the app's servers in the pod,
// the node's service address fd00:96::10 with a server on 80.
func newIPv6OnlyTopology(t *testing.T) *topology {
	t.Helper()
	tp := &topology{pod: nstest.New(t, "pod"), node: nstest.New(t, "node")}
	nstest.Veth(t, tp.pod, "eth0", []string{podV6 + "/64"}, tp.node, "eth0", []string{nodeV6 + "/64"})
	tp.pod.Run(t, "ip", "-6", "route", "add", "default", "via", nodeV6)
	tp.node.Run(t, "ip", "-6", "addr", "add", "fd00:96::10/128", "dev", "lo")
	serveTCP(t, tp.node, "[::]:80", "node-80", false)
	serveTCP(t, tp.pod, "[::]:15001", "proxy-out", true)
	serveTCP(t, tp.pod, "[::]:15006", "proxy-in", true)
	serveTCP(t, tp.pod, "[::]:8080", "pod-8080", false)
	return tp
}

// TestIPv6OnlyPod: a pod with only IPv6 addresses and an IPv6-only Spec is
// captured both ways in every mode, and Envoy's ::6 passthrough works.
func TestIPv6OnlyPod(t *testing.T) {
	tproxy := redirect.DefaultSpec()
	tproxy.Interception = redirect.InterceptTProxy
	for _, tc := range []struct {
		name string
		spec redirect.Spec
	}{{"sidecar", redirect.DefaultSpec()}, {"tproxy", tproxy}, {"ambient", redirect.DefaultAmbientSpec()}} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newIPv6OnlyTopology(t)
			s := tc.spec
			s.IPv4 = false
			r := mustApply(t, tp, s)
			expect(t, "outbound", dialFrom(t, tp.pod, "tcp", "[fd00:96::10]:80"), "proxy-out [fd00:96::10]:80")
			expect(t, "inbound", dialFrom(t, tp.node, "tcp", "["+podV6+"]:8080"), "proxy-in ["+podV6+"]:8080")
			if s.Mode == redirect.ModeSidecar {
				expect(t, "passthrough ::6", dialWith(t, tp.pod, fromAddr("::6"), "tcp", "["+podV6+"]:8080"), "pod-8080")
			}
			if drift, err := verifyIn(tp.pod.Handle(t), r); err != nil || len(drift) > 0 {
				t.Errorf("Verify: %q, %v", drift, err)
			}
		})
	}
}
