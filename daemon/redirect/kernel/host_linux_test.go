package kernel

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// TestHostProbeSNAT: the node dials a pod, as the kubelet does for a probe;
// the pod sees the probe address while its IP is in the host table's set,
// and the node's own address once it is removed.
func TestHostProbeSNAT(t *testing.T) {
	tp := newNetPair(t)
	serve(t, tp.pod, net.ListenConfig{}, "[::]:8080", func(c net.Conn) {
		fmt.Fprintln(c, "from "+unmapped(c.RemoteAddr()).Addr().String())
	})
	node := tp.node.Handle(t)
	pod4, pod6 := netip.MustParseAddr(podV4), netip.MustParseAddr(podV6)
	dial := func(what, addr, want string) {
		t.Helper()
		expect(t, what, dialFrom(t, tp.node, "tcp", addr), "from "+want)
	}

	if err := addHostIPsIn(node, pod4); err == nil {
		t.Error("AddHostIPs before EnsureHostTable succeeded")
	}
	if err := ensureHostTableIn(node, redirect.DefaultHostConfig()); err != nil {
		t.Fatal(err)
	}
	want, _ := redirect.BuildHost(redirect.DefaultHostConfig())
	if got := tp.node.Run(t, "nft", "list", "table", "inet", redirect.HostTableName); canonical(got) != canonical(want.Render()) {
		t.Errorf("kernel holds\n%s\nwant\n%s", got, want.Render())
	}
	dial("not enrolled", podV4+":8080", nodeV4)

	if err := addHostIPsIn(node, pod4, pod6, pod4); err != nil {
		t.Fatal(err)
	}
	dial("enrolled v4", podV4+":8080", redirect.DefaultProbeSNATIPv4.String())
	dial("enrolled v6", "["+podV6+"]:8080", redirect.DefaultProbeSNATIPv6.String())

	// Re-asserting the table (agent restart) keeps the enrolled pods.
	if err := ensureHostTableIn(node, redirect.DefaultHostConfig()); err != nil {
		t.Fatal(err)
	}
	dial("after EnsureHostTable again", podV4+":8080", redirect.DefaultProbeSNATIPv4.String())
	if out := tp.node.Run(t, "nft", "list", "set", "inet", redirect.HostTableName, "probe-pods-v4"); !strings.Contains(out, podV4) {
		t.Errorf("set lost its element:\n%s", out)
	}

	if err := removeHostIPsIn(node, pod4); err != nil {
		t.Fatal(err)
	}
	dial("removed v4", podV4+":8080", nodeV4)
	dial("v6 still enrolled", "["+podV6+"]:8080", redirect.DefaultProbeSNATIPv6.String())
	if err := removeHostIPsIn(node, pod4, pod6); err != nil {
		t.Fatalf("removing an absent address: %v", err)
	}
	dial("removed v6", "["+podV6+"]:8080", nodeV6)

	for i := range 2 {
		if err := removeHostTableIn(node); err != nil {
			t.Fatalf("RemoveHostTable #%d: %v", i+1, err)
		}
	}
	if out := tp.node.Run(t, "nft", "list", "tables"); strings.Contains(out, redirect.HostTableName) {
		t.Errorf("table still there: %s", out)
	}
}

// TestHostProbeToAmbientPod is the whole probe path: the host table SNATs
// the node's connection and the ambient pod lets it past ztunnel, while
// the same connection from a node address that is not SNATed is captured.
func TestHostProbeToAmbientPod(t *testing.T) {
	tp := newAmbientTopology(t)
	node := tp.node.Handle(t)
	mustApply(t, tp, redirect.DefaultAmbientSpec())
	if err := ensureHostTableIn(node, redirect.DefaultHostConfig()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeHostTableIn(node) })
	expect(t, "not enrolled", dialFrom(t, tp.node, "tcp", podV4+":8080"), "ztunnel-in "+podV4+":8080 app=pod-8080")
	if err := addHostIPsIn(node, netip.MustParseAddr(podV4), netip.MustParseAddr(podV6)); err != nil {
		t.Fatal(err)
	}
	expect(t, "probe v4", dialFrom(t, tp.node, "tcp", podV4+":8080"), "pod-8080")
	expect(t, "probe v6", dialFrom(t, tp.node, "tcp", "["+podV6+"]:8080"), "pod-8080")
}

// The probe addresses are configuration (--probe-snat-ipv4/-ipv6): with
// other addresses on both sides the probe still reaches the app; with the
// host SNATing to an address the pod's rules do not know, it is captured
// (ztunnel sees it), so the two sides must agree.
func TestHostProbeCustomSNAT(t *testing.T) {
	v4, v6 := netip.MustParseAddr("169.254.9.9"), netip.MustParseAddr("fd00:9::9")
	for _, tc := range []struct {
		name     string
		podKnows bool
		want     string
	}{{"both sides", true, "pod-8080"}, {"host only", false, "ztunnel-in " + podV4 + ":8080 app=pod-8080"}} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newAmbientTopology(t)
			node := tp.node.Handle(t)
			spec := redirect.DefaultAmbientSpec()
			if tc.podKnows {
				spec.ProbeSNATIPv4, spec.ProbeSNATIPv6 = v4, v6
			}
			mustApply(t, tp, spec)
			hc := redirect.DefaultHostConfig()
			hc.ProbeSNATIPv4, hc.ProbeSNATIPv6 = v4, v6
			if err := ensureHostTableIn(node, hc); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { removeHostTableIn(node) })
			if err := addHostIPsIn(node, netip.MustParseAddr(podV4), netip.MustParseAddr(podV6)); err != nil {
				t.Fatal(err)
			}
			expect(t, "probe v4", dialFrom(t, tp.node, "tcp", podV4+":8080"), tc.want)
		})
	}
}

// TestHostProbeSNATOnlyKubeletUID: only a socket the kubelet's uid owns is
// SNATed past ztunnel. Another local user dialling the same pod port from
// the node, with the node's own address, is captured as ordinary inbound
// traffic (ztunnel sees it, with the original destination); with no uid
// known, nothing is SNATed. The kernel holds what Render says.
func TestHostProbeSNATOnlyKubeletUID(t *testing.T) {
	tp := newAmbientTopology(t)
	node := tp.node.Handle(t)
	mustApply(t, tp, redirect.DefaultAmbientSpec())
	t.Cleanup(func() { removeHostTableIn(node) })
	captured := map[string]string{podV4: "ztunnel-in " + podV4 + ":8080 app=pod-8080", podV6: "ztunnel-in [" + podV6 + "]:8080 app=pod-8080"}
	const probed = "pod-8080"
	for _, tc := range []struct {
		name                string
		uid                 redirect.UID
		root, u4242, u65534 string // what each dialler's connection reaches
	}{
		{"kubelet as root (the default)", redirect.UIDOf(0), probed, "captured", "captured"},
		{"kubelet as 4242", redirect.UIDOf(4242), "captured", probed, "captured"},
		{"no kubelet uid", redirect.UID{}, "captured", "captured", "captured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := redirect.DefaultHostConfig()
			hc.ProbeUID = tc.uid
			if err := ensureHostTableIn(node, hc); err != nil {
				t.Fatal(err)
			}
			if err := addHostIPsIn(node, netip.MustParseAddr(podV4), netip.MustParseAddr(podV6)); err != nil {
				t.Fatal(err)
			}
			want, _ := redirect.BuildHost(hc)
			got := tp.node.Run(t, "nft", "list", "table", "inet", redirect.HostTableName)
			if g, w := canonical(stripElements(got)), canonical(want.Render()); g != w {
				t.Errorf("kernel holds\n%s\nwant\n%s", g, w)
			}
			for _, pod := range []string{podV4, podV6} {
				addr := net.JoinHostPort(pod, "8080")
				outcome := func(w string) string {
					if w == "captured" {
						return captured[pod]
					}
					return w
				}
				expect(t, "root to "+pod, dialFrom(t, tp.node, "tcp", addr), outcome(tc.root))
				expect(t, "uid 4242 to "+pod, dialAs(t, tp.node, 4242, 4242, "tcp", addr), outcome(tc.u4242))
				expect(t, "uid 65534 to "+pod, dialAs(t, tp.node, 65534, 65534, "tcp", addr), outcome(tc.u65534))
			}
		})
	}
}

// stripElements drops the element lines nft lists for a set with members.
func stripElements(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "elements = ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
