package kernel

import (
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// TestTraffic applies rulesets to a pod netns and checks, with real
// connections, where the bytes land and what original destination the
// proxy sees. Each subtest re-applies its own ruleset over the last one.
func TestTraffic(t *testing.T) {
	tp := newTopology(t)

	t.Run("outbound redirected with original destination", func(t *testing.T) {
		mustApply(t, tp, redirect.DefaultSpec())
		expect(t, "v4", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "proxy-out 10.96.0.10:80")
		expect(t, "v6", dialFrom(t, tp.pod, "tcp", "[fd00:96::10]:80"), "proxy-out [fd00:96::10]:80")
	})

	t.Run("proxy uid and gid bypass", func(t *testing.T) {
		mustApply(t, tp, redirect.DefaultSpec())
		expect(t, "uid 1337 v4", dialAs(t, tp.pod, 1337, 1000, "tcp", "10.96.0.10:80"), "node-80")
		expect(t, "uid 1337 v6", dialAs(t, tp.pod, 1337, 1000, "tcp", "[fd00:96::10]:80"), "node-80")
		expect(t, "gid 1337 v4", dialAs(t, tp.pod, 1000, 1337, "tcp", "10.96.0.10:80"), "node-80")
		expect(t, "gid 1337 v6", dialAs(t, tp.pod, 1000, 1337, "tcp", "[fd00:96::10]:80"), "node-80")
		// The control: the same child under another identity is captured.
		expect(t, "uid 1000", dialAs(t, tp.pod, 1000, 1000, "tcp", "10.96.0.10:80"), "proxy-out 10.96.0.10:80")
	})

	t.Run("loopback to own pod address", func(t *testing.T) {
		mustApply(t, tp, redirect.DefaultSpec())
		// The proxy forwarding to its own pod (an app calling itself via
		// a VIP) re-enters as inbound; the app doing so directly does not.
		expect(t, "proxy v4", dialAs(t, tp.pod, 1337, 1337, "tcp", podV4+":8080"), "proxy-in "+podV4+":8080")
		expect(t, "proxy v6", dialAs(t, tp.pod, 1337, 1337, "tcp", "["+podV6+"]:8080"), "proxy-in ["+podV6+"]:8080")
		expect(t, "proxy hbone", dialAs(t, tp.pod, 1337, 1337, "tcp", podV4+":15008"), "pod-15008")
		expect(t, "app", dialFrom(t, tp.pod, "tcp", podV4+":8080"), "pod-8080")
		expect(t, "localhost", dialFrom(t, tp.pod, "tcp", "127.0.0.1:8080"), "pod-8080")
		// Envoy's inbound passthrough: from 127.0.0.6 and ::6 (which
		// Apply adds to lo) straight to the app.
		expect(t, "passthrough v4", dialWith(t, tp.pod, fromAddr("127.0.0.6"), "tcp", podV4+":8080"), "pod-8080")
		expect(t, "passthrough v6", dialWith(t, tp.pod, fromAddr("::6"), "tcp", "["+podV6+"]:8080"), "pod-8080")
	})

	t.Run("inbound redirected and pass ports", func(t *testing.T) {
		mustApply(t, tp, redirect.DefaultSpec())
		expect(t, "v4", dialFrom(t, tp.node, "tcp", podV4+":8080"), "proxy-in "+podV4+":8080")
		expect(t, "v6", dialFrom(t, tp.node, "tcp", "["+podV6+"]:8080"), "proxy-in ["+podV6+"]:8080")
		for _, port := range []string{"15008", "15020", "15021", "15090"} {
			expect(t, "pass v4 "+port, dialFrom(t, tp.node, "tcp", podV4+":"+port), "pod-"+port)
			expect(t, "pass v6 "+port, dialFrom(t, tp.node, "tcp", "["+podV6+"]:"+port), "pod-"+port)
		}
	})

	t.Run("inbound include and exclude ports", func(t *testing.T) {
		s := redirect.DefaultSpec()
		s.IncludeInboundPorts = []uint16{8080}
		mustApply(t, tp, s)
		expect(t, "included", dialFrom(t, tp.node, "tcp", podV4+":8080"), "proxy-in "+podV4+":8080")
		expect(t, "not included", dialFrom(t, tp.node, "tcp", podV4+":9090"), "pod-9090")

		s = redirect.DefaultSpec()
		s.ExcludeInboundPorts = []uint16{8080}
		mustApply(t, tp, s)
		expect(t, "excluded", dialFrom(t, tp.node, "tcp", podV4+":8080"), "pod-8080")
		expect(t, "not excluded", dialFrom(t, tp.node, "tcp", podV4+":9090"), "proxy-in "+podV4+":9090")
	})

	t.Run("outbound exclusions", func(t *testing.T) {
		s := redirect.DefaultSpec()
		s.ExcludeOutboundPorts = []uint16{81}
		s.ExcludeOutboundCIDRs = prefixes("10.96.0.11/32", "fd00:96::11/128")
		mustApply(t, tp, s)
		expect(t, "excluded port", dialFrom(t, tp.pod, "tcp", "10.96.0.10:81"), "node-81")
		expect(t, "excluded v4 cidr", dialFrom(t, tp.pod, "tcp", "10.96.0.11:80"), "node-80")
		expect(t, "excluded v6 cidr", dialFrom(t, tp.pod, "tcp", "[fd00:96::11]:80"), "node-80")
		expect(t, "captured v4", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "proxy-out 10.96.0.10:80")
		expect(t, "captured v6", dialFrom(t, tp.pod, "tcp", "[fd00:96::10]:80"), "proxy-out [fd00:96::10]:80")
	})

	t.Run("outbound inclusions", func(t *testing.T) {
		s := redirect.DefaultSpec()
		s.IncludeOutboundCIDRs = prefixes("10.96.0.0/24")
		s.IncludeOutboundPorts = []uint16{81}
		mustApply(t, tp, s)
		expect(t, "in cidr", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "proxy-out 10.96.0.10:80")
		expect(t, "outside cidr", dialFrom(t, tp.pod, "tcp", "10.97.0.10:80"), "node-80")
		expect(t, "outside cidr, included port", dialFrom(t, tp.pod, "tcp", "10.97.0.10:81"), "proxy-out 10.97.0.10:81")
		// Only IPv4 ranges were listed, so IPv6 is not captured at all.
		expect(t, "v6 not listed", dialFrom(t, tp.pod, "tcp", "[fd00:96::10]:80"), "node-80")
	})

	t.Run("excluded interface", func(t *testing.T) {
		s := redirect.DefaultSpec()
		s.ExcludeInterfaces = []string{"eth0"}
		mustApply(t, tp, s)
		expect(t, "outbound", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "node-80")
		expect(t, "inbound", dialFrom(t, tp.node, "tcp", podV4+":8080"), "pod-8080")
	})

	t.Run("dns capture", func(t *testing.T) {
		s := redirect.DefaultSpec()
		s.CaptureDNS = true
		mustApply(t, tp, s)
		expect(t, "udp v4", dialFrom(t, tp.pod, "udp", "10.96.0.10:53"), "dns-proxy")
		expect(t, "udp v6", dialFrom(t, tp.pod, "udp", "[fd00:96::10]:53"), "dns-proxy")
		expect(t, "tcp", dialFrom(t, tp.pod, "tcp", "10.96.0.10:53"), "dns-proxy-tcp 10.96.0.10:53")
		expect(t, "proxy's own udp", dialAs(t, tp.pod, 1337, 1337, "udp", "10.96.0.10:53"), "node-dns")

		mustApply(t, tp, redirect.DefaultSpec())
		expect(t, "off: udp", dialFrom(t, tp.pod, "udp", "10.96.0.10:53"), "node-dns")
		expect(t, "off: tcp is plain outbound", dialFrom(t, tp.pod, "tcp", "10.96.0.10:53"), "proxy-out 10.96.0.10:53")
	})

	t.Run("ipv4 only", func(t *testing.T) {
		s := redirect.DefaultSpec()
		s.IPv6 = false
		mustApply(t, tp, s)
		expect(t, "v4", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "proxy-out 10.96.0.10:80")
		expect(t, "v6", dialFrom(t, tp.pod, "tcp", "[fd00:96::10]:80"), "node-80")
	})

	t.Run("ipv6 only", func(t *testing.T) {
		s := redirect.DefaultSpec()
		s.IPv4 = false
		mustApply(t, tp, s)
		expect(t, "v4", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "node-80")
		expect(t, "v6", dialFrom(t, tp.pod, "tcp", "[fd00:96::10]:80"), "proxy-out [fd00:96::10]:80")
		expect(t, "inbound v6", dialFrom(t, tp.node, "tcp", "["+podV6+"]:8080"), "proxy-in ["+podV6+"]:8080")
		expect(t, "inbound v4", dialFrom(t, tp.node, "tcp", podV4+":8080"), "pod-8080")
		expect(t, "passthrough v6", dialWith(t, tp.pod, fromAddr("::6"), "tcp", "["+podV6+"]:8080"), "pod-8080")
		s.Interception = redirect.InterceptTProxy
		mustApply(t, tp, s)
		expect(t, "tproxy inbound v6", dialFrom(t, tp.node, "tcp", "["+podV6+"]:8080"), "proxy-in ["+podV6+"]:8080")
		expect(t, "tproxy inbound v4", dialFrom(t, tp.node, "tcp", podV4+":8080"), "pod-8080")
	})

	t.Run("tproxy inbound", func(t *testing.T) {
		s := redirect.DefaultSpec()
		s.Interception = redirect.InterceptTProxy
		mustApply(t, tp, s)
		// The proxy's transparent listener sees the original destination
		// as its local address: no NAT took place.
		expect(t, "v4", dialFrom(t, tp.node, "tcp", podV4+":8080"), "proxy-in "+podV4+":8080")
		expect(t, "v6", dialFrom(t, tp.node, "tcp", "["+podV6+"]:8080"), "proxy-in ["+podV6+"]:8080")
		expect(t, "pass port", dialFrom(t, tp.node, "tcp", podV4+":15021"), "pod-15021")
		expect(t, "outbound stays REDIRECT", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "proxy-out 10.96.0.10:80")
		expect(t, "proxy to self", dialAs(t, tp.pod, 1337, 1337, "tcp", podV4+":8080"), "proxy-in "+podV4+":8080")
		for _, fam := range []string{"-4", "-6"} {
			if out := tp.pod.Run(t, "ip", fam, "rule", "list"); strings.Count(out, "lookup 133") != 1 {
				t.Errorf("ip %s rule list: want one rule for table 133:\n%s", fam, out)
			}
		}

		// Back to REDIRECT: the policy routes go with the TPROXY table.
		mustApply(t, tp, redirect.DefaultSpec())
		if out := tp.pod.Run(t, "ip", "rule", "list"); strings.Contains(out, "lookup 133") {
			t.Errorf("TPROXY's ip rule outlived it:\n%s", out)
		}
		expect(t, "redirect again", dialFrom(t, tp.node, "tcp", podV4+":8080"), "proxy-in "+podV4+":8080")
	})

	t.Run("pass ports exactly as listed", func(t *testing.T) {
		// Istio's TPROXY mode captures 15008; policy says so by leaving it
		// out of the list, and nothing in the builder passes it anyway.
		for _, mode := range []redirect.Interception{redirect.InterceptTProxy, redirect.InterceptRedirect} {
			s := redirect.DefaultSpec()
			s.Interception = mode
			s.InboundPassPorts = []uint16{15021}
			mustApply(t, tp, s)
			expect(t, string(mode)+" 15008 captured", dialFrom(t, tp.node, "tcp", podV4+":15008"), "proxy-in "+podV4+":15008")
			expect(t, string(mode)+" 15021 passes", dialFrom(t, tp.node, "tcp", podV4+":15021"), "pod-15021")
		}
	})

	t.Run("no inbound port", func(t *testing.T) {
		s := redirect.DefaultSpec()
		s.IncludeNoInboundPorts = true
		mustApply(t, tp, s)
		expect(t, "inbound v4", dialFrom(t, tp.node, "tcp", podV4+":8080"), "pod-8080")
		expect(t, "inbound v6", dialFrom(t, tp.node, "tcp", "["+podV6+"]:8080"), "pod-8080")
		expect(t, "outbound", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "proxy-out 10.96.0.10:80")
	})

	t.Run("no outbound cidr", func(t *testing.T) {
		s := redirect.DefaultSpec()
		s.IncludeNoOutboundCIDRs = true
		s.IncludeOutboundPorts = []uint16{81}
		mustApply(t, tp, s)
		expect(t, "v4", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "node-80")
		expect(t, "v6", dialFrom(t, tp.pod, "tcp", "[fd00:96::10]:80"), "node-80")
		expect(t, "included port", dialFrom(t, tp.pod, "tcp", "10.96.0.10:81"), "proxy-out 10.96.0.10:81")
		expect(t, "inbound", dialFrom(t, tp.node, "tcp", podV4+":8080"), "proxy-in "+podV4+":8080")

		s.IncludeOutboundPorts = nil
		mustApply(t, tp, s)
		expect(t, "no port either", dialFrom(t, tp.pod, "tcp", "10.96.0.10:81"), "node-81")
	})

	t.Run("removed", func(t *testing.T) {
		mustApply(t, tp, redirect.DefaultSpec())
		if err := removeIn(tp.pod.Handle(t)); err != nil {
			t.Fatal(err)
		}
		expect(t, "outbound", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "node-80")
	})
}
