package kernel

import (
	"net"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// serveNodeDNSv6 is the node's resolver on its IPv6 service address. An
// address just added to lo can refuse a bind for a moment (it is still
// being set up), so the bind is retried until it takes.
func serveNodeDNSv6(t *testing.T, tp *topology) {
	t.Helper()
	const addr = "[fd00:96::10]:53"
	nstest.Eventually(t, 5*time.Second, func() bool {
		return tp.node.Do(func() error {
			c, err := net.ListenPacket("udp", addr)
			if err == nil {
				c.Close()
			}
			return err
		}) == nil
	}, "bind udp %s in the node", addr)
	serveUDP(t, tp.node, addr, "node-dns")
}

// The app's DNS query and the proxy's upstream query for it from the same
// source port have one 5-tuple; in one conntrack zone the upstream query
// joins the app's NATed connection and loops back to the DNS listener
// (istio/istio#33469). These ports are fixed so the two sockets share one.
const (
	reusedPortV4 = "10.250.0.2:40053"
	reusedPortV6 = "[fd00:250::2]:40053"
)

func TestDNSSourcePortReuse(t *testing.T) {
	t.Run("sidecar", func(t *testing.T) {
		tp := newTopology(t)
		s := redirect.DefaultSpec()
		s.CaptureDNS = true
		mustApply(t, tp, s)
		serveNodeDNSv6(t, tp)
		for _, c := range []struct{ local, dst string }{{reusedPortV4, "10.96.0.10:53"}, {reusedPortV6, "[fd00:96::10]:53"}} {
			expect(t, "app "+c.dst, dialAsFrom(t, tp.pod, 1000, 1000, "udp", c.local, c.dst), "dns-proxy")
			expect(t, "proxy upstream from the app's port "+c.dst, dialAsFrom(t, tp.pod, 1337, 1337, "udp", c.local, c.dst), "node-dns")
			// And the app again: its own connection is still its own.
			expect(t, "app again "+c.dst, dialAsFrom(t, tp.pod, 1000, 1000, "udp", c.local, c.dst), "dns-proxy")
		}
	})
	t.Run("ambient", func(t *testing.T) {
		tp := newAmbientTopology(t)
		serveNodeDNSv6(t, tp)
		s := redirect.DefaultAmbientSpec()
		s.CaptureDNS = true
		mustApply(t, tp, s)
		for _, c := range []struct{ local, dst string }{{reusedPortV4, "10.96.0.10:53"}, {reusedPortV6, "[fd00:96::10]:53"}} {
			laddr, err := net.ResolveUDPAddr("udp", c.local)
			if err != nil {
				t.Fatal(err)
			}
			app := net.Dialer{LocalAddr: laddr}
			zt := ztunnelDialer()
			zt.LocalAddr = laddr
			expect(t, "app "+c.dst, dialWith(t, tp.pod, app, "udp", c.dst), "ztunnel-dns")
			expect(t, "ztunnel upstream from the app's port "+c.dst, dialWith(t, tp.pod, zt, "udp", c.dst), "node-dns")
			expect(t, "app again "+c.dst, dialWith(t, tp.pod, app, "udp", c.dst), "ztunnel-dns")
		}
	})
}

// TestDNSOptions: ExcludeOutboundPorts applies to UDP before the DNS
// capture; with DNS capture, TCP 53 over lo from the app is still captured
// and the proxy's to its own pod address is not sent to inbound.
func TestDNSOptions(t *testing.T) {
	tp := newTopology(t)
	serveTCP(t, tp.pod, "[::]:53", "pod-53", false)
	s := redirect.DefaultSpec()
	s.CaptureDNS = true
	mustApply(t, tp, s)
	expect(t, "app tcp 53 to own address", dialFrom(t, tp.pod, "tcp", podV4+":53"), "dns-proxy-tcp "+podV4+":53")
	expect(t, "proxy tcp 53 to own address", dialAs(t, tp.pod, 1337, 1000, "tcp", podV4+":53"), "pod-53")
	expect(t, "app tcp 8080 to own address", dialFrom(t, tp.pod, "tcp", podV4+":8080"), "pod-8080")

	s.ExcludeOutboundPorts = []uint16{53}
	mustApply(t, tp, s)
	expect(t, "udp 53 excluded", dialFrom(t, tp.pod, "udp", "10.96.0.10:53"), "node-dns")
	expect(t, "tcp 53 excluded", dialFrom(t, tp.pod, "tcp", "10.96.0.10:53"), "node-53")
}

// TestIncludeLoopback: an include list naming loopback drops the rule that
// lets the app reach its own pod address over lo uncaptured.
func TestIncludeLoopback(t *testing.T) {
	tp := newTopology(t)
	s := redirect.DefaultSpec()
	s.IncludeOutboundCIDRs = prefixes("127.0.0.0/8", "10.250.0.0/24")
	mustApply(t, tp, s)
	expect(t, "app to own address", dialFrom(t, tp.pod, "tcp", podV4+":8080"), "proxy-out "+podV4+":8080")
	expect(t, "localhost", dialFrom(t, tp.pod, "tcp", "127.0.0.1:8080"), "pod-8080")
	s.IncludeOutboundCIDRs = prefixes("10.250.0.0/24")
	mustApply(t, tp, s)
	expect(t, "control: app to own address", dialFrom(t, tp.pod, "tcp", podV4+":8080"), "pod-8080")
}
