package kernel

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/vishvananda/netlink"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

const ztunnelMark = 0x539

// newAmbientTopology is newNetPair with a test ztunnel in the pod: its
// in-pod listeners on 15001, 15006 and 15053 and every socket it opens
// carry ztunnel's mark. Inbound, it does what ztunnel does: connects on to
// the original destination from the client's own address (a transparent
// socket) and reports what the app answered, which only arrives if the
// connmark and the policy route bring the app's reply back to it. The node
// also owns the probe SNAT addresses, to dial from them.
func newAmbientTopology(t *testing.T) *topology {
	t.Helper()
	tp := newNetPair(t)
	zt := sockopts(marked(ztunnelMark))
	serve(t, tp.pod, net.ListenConfig{Control: zt}, "[::]:15001", func(c net.Conn) {
		fmt.Fprintln(c, "ztunnel-out "+originalDst(c.(*net.TCPConn), "[::]:15001"))
	})
	serve(t, tp.pod, net.ListenConfig{Control: sockopts(marked(ztunnelMark), transparent)}, "[::]:15006", func(c net.Conn) {
		// REDIRECT-ed, as Istio's in-pod rules send inbound to ztunnel.
		dst, err := netip.ParseAddrPort(originalDst(c.(*net.TCPConn), "[::]:15006"))
		if err != nil {
			fmt.Fprintln(c, "ztunnel-in no original destination:", err)
			return
		}
		src := unmapped(c.RemoteAddr())
		d := net.Dialer{
			Timeout:   2 * time.Second,
			LocalAddr: &net.TCPAddr{IP: src.Addr().AsSlice()},
			Control:   sockopts(marked(ztunnelMark), transparent),
		}
		var app string
		// Handlers run on threads of the test's own netns; the socket
		// to the app must be made in the pod's.
		if err := tp.pod.Do(func() error {
			up, err := d.Dial("tcp", dst.String())
			if err != nil {
				return err
			}
			defer up.Close()
			up.SetDeadline(time.Now().Add(2 * time.Second))
			line, err := bufio.NewReader(up).ReadString('\n')
			app = strings.TrimSpace(line)
			return err
		}); err != nil {
			app = "error:" + strings.ReplaceAll(err.Error(), " ", "_")
		}
		fmt.Fprintf(c, "ztunnel-in %s app=%s\n", dst, app)
	})
	serve(t, tp.pod, net.ListenConfig{Control: zt}, "[::]:15053", func(c net.Conn) {
		fmt.Fprintln(c, "ztunnel-dns-tcp "+originalDst(c.(*net.TCPConn), "[::]:15053"))
	})
	for _, addr := range []string{"127.0.0.1:15053", "[::1]:15053"} {
		serveUDP(t, tp.pod, addr, "ztunnel-dns", marked(ztunnelMark))
	}
	// The app; 15008 stands in for ztunnel's HBONE listener, which
	// inbound reaches by its address.
	for _, port := range []string{"8080", "15008"} {
		serveTCP(t, tp.pod, "[::]:"+port, "pod-"+port, false)
	}
	if err := tp.node.Do(func() error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, a := range []string{redirect.DefaultProbeSNATIPv4.String() + "/32", redirect.DefaultProbeSNATIPv6.String() + "/128"} {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				return err
			}
			addr.Flags = 0x80 // IFA_F_NODAD: usable at once
			if err := netlink.AddrAdd(eth0, addr); err != nil {
				return fmt.Errorf("add %s: %w", a, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("node probe addresses: %v", err)
	}
	return tp
}

func ztunnelDialer() net.Dialer { return net.Dialer{Control: sockopts(marked(ztunnelMark))} }

func fromAddr(a string) net.Dialer {
	return net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(a)}}
}

// ipRuleCount counts the pod's ip rules (one family) that look up table.
func ipRuleCount(t *testing.T, ns *nstest.NS, fam string, table int) int {
	t.Helper()
	return strings.Count(ns.Run(t, "ip", fam, "rule", "list"), fmt.Sprintf("lookup %d", table))
}

func TestAmbientTraffic(t *testing.T) {
	tp := newAmbientTopology(t)
	h := tp.pod.Handle(t)

	t.Run("outbound to ztunnel with original destination", func(t *testing.T) {
		mustApply(t, tp, redirect.DefaultAmbientSpec())
		expect(t, "v4", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "ztunnel-out 10.96.0.10:80")
		expect(t, "v6", dialFrom(t, tp.pod, "tcp", "[fd00:96::10]:80"), "ztunnel-out [fd00:96::10]:80")
		expect(t, "localhost", dialFrom(t, tp.pod, "tcp", "127.0.0.1:8080"), "pod-8080")
		expect(t, "own pod address", dialFrom(t, tp.pod, "tcp", podV4+":8080"), "pod-8080")
	})

	t.Run("ztunnel's own traffic is not captured", func(t *testing.T) {
		mustApply(t, tp, redirect.DefaultAmbientSpec())
		expect(t, "v4", dialWith(t, tp.pod, ztunnelDialer(), "tcp", "10.96.0.10:80"), "node-80")
		expect(t, "v6", dialWith(t, tp.pod, ztunnelDialer(), "tcp", "[fd00:96::10]:80"), "node-80")
	})

	t.Run("inbound to ztunnel by REDIRECT, replies routed back", func(t *testing.T) {
		mustApply(t, tp, redirect.DefaultAmbientSpec())
		expect(t, "v4", dialFrom(t, tp.node, "tcp", podV4+":8080"), "ztunnel-in "+podV4+":8080 app=pod-8080")
		expect(t, "v6", dialFrom(t, tp.node, "tcp", "["+podV6+"]:8080"), "ztunnel-in ["+podV6+"]:8080 app=pod-8080")
		expect(t, "hbone v4", dialFrom(t, tp.node, "tcp", podV4+":15008"), "pod-15008")
		expect(t, "hbone v6", dialFrom(t, tp.node, "tcp", "["+podV6+"]:15008"), "pod-15008")
	})

	t.Run("probe source not captured", func(t *testing.T) {
		mustApply(t, tp, redirect.DefaultAmbientSpec())
		expect(t, "v4", dialWith(t, tp.node, fromAddr(redirect.DefaultProbeSNATIPv4.String()), "tcp", podV4+":8080"), "pod-8080")
		expect(t, "v6", dialWith(t, tp.node, fromAddr(redirect.DefaultProbeSNATIPv6.String()), "tcp", "["+podV6+"]:8080"), "pod-8080")
		// The control: the node's own address is captured.
		expect(t, "node address", dialWith(t, tp.node, fromAddr(nodeV4), "tcp", podV4+":8080"), "ztunnel-in "+podV4+":8080 app=pod-8080")
	})

	t.Run("dns", func(t *testing.T) {
		s := redirect.DefaultAmbientSpec()
		s.CaptureDNS = true
		mustApply(t, tp, s)
		expect(t, "udp v4", dialFrom(t, tp.pod, "udp", "10.96.0.10:53"), "ztunnel-dns")
		expect(t, "udp v6", dialFrom(t, tp.pod, "udp", "[fd00:96::10]:53"), "ztunnel-dns")
		expect(t, "tcp", dialFrom(t, tp.pod, "tcp", "10.96.0.10:53"), "ztunnel-dns-tcp 10.96.0.10:53")
		expect(t, "ztunnel's own udp", dialWith(t, tp.pod, ztunnelDialer(), "udp", "10.96.0.10:53"), "node-dns")

		s.CaptureDNS = false
		mustApply(t, tp, s)
		expect(t, "off: udp", dialFrom(t, tp.pod, "udp", "10.96.0.10:53"), "node-dns")
		expect(t, "off: tcp is plain outbound", dialFrom(t, tp.pod, "tcp", "10.96.0.10:53"), "ztunnel-out 10.96.0.10:53")
	})

	t.Run("bypass inbound", func(t *testing.T) {
		s := redirect.DefaultAmbientSpec()
		s.BypassInboundCapture = true
		mustApply(t, tp, s)
		expect(t, "inbound", dialFrom(t, tp.node, "tcp", podV4+":8080"), "pod-8080")
		expect(t, "outbound", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "ztunnel-out 10.96.0.10:80")
	})

	t.Run("ipv4 only", func(t *testing.T) {
		s := redirect.DefaultAmbientSpec()
		s.IPv6 = false
		mustApply(t, tp, s)
		expect(t, "v4", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "ztunnel-out 10.96.0.10:80")
		expect(t, "v6", dialFrom(t, tp.pod, "tcp", "[fd00:96::10]:80"), "node-80")
		expect(t, "inbound v6", dialFrom(t, tp.node, "tcp", "["+podV6+"]:8080"), "pod-8080")
		if n := ipRuleCount(t, tp.pod, "-6", 100); n != 0 {
			t.Errorf("%d IPv6 rules for table 100 with IPv6 off", n)
		}
	})

	t.Run("policy routes: idempotent, verified, removed", func(t *testing.T) {
		r := mustApply(t, tp, redirect.DefaultAmbientSpec())
		mustApply(t, tp, redirect.DefaultAmbientSpec())
		for _, fam := range []string{"-4", "-6"} {
			if n := ipRuleCount(t, tp.pod, fam, 100); n != 1 {
				t.Errorf("ip %s: %d rules for table 100 after two Applies, want 1", fam, n)
			}
			if out := tp.pod.Run(t, "ip", fam, "route", "show", "table", "100"); strings.Count(out, "local") != 1 {
				t.Errorf("ip %s route show table 100:\n%s", fam, out)
			}
		}
		if drift, err := verifyIn(h, r); err != nil || len(drift) > 0 {
			t.Fatalf("Verify: %q, %v", drift, err)
		}
		tp.pod.Run(t, "ip", "-4", "rule", "del", "pref", "32764")
		tp.pod.Run(t, "ip", "-6", "route", "del", "local", "::/0", "dev", "lo", "table", "100")
		drift, err := verifyIn(h, r)
		all := strings.Join(drift, "\n")
		if err != nil || !strings.Contains(all, "ip -4 rule fwmark 0x111/0xfff lookup 100 pref 32764 is missing") ||
			!strings.Contains(all, "ip -6 route local ::/0 dev lo table 100 is missing") {
			t.Errorf("Verify after deleting a rule and a route: %q, %v", drift, err)
		}
		mustApply(t, tp, redirect.DefaultAmbientSpec())
		if drift, err := verifyIn(h, r); err != nil || len(drift) > 0 {
			t.Errorf("Verify after re-Apply: %q, %v", drift, err)
		}
		expect(t, "repaired", dialFrom(t, tp.node, "tcp", podV4+":8080"), "ztunnel-in "+podV4+":8080 app=pod-8080")

		if err := removeIn(h); err != nil {
			t.Fatal(err)
		}
		for _, fam := range []string{"-4", "-6"} {
			if n := ipRuleCount(t, tp.pod, fam, 100); n != 0 {
				t.Errorf("ip %s: %d rules for table 100 after Remove", fam, n)
			}
			if out := tp.pod.Run(t, "ip", fam, "route", "show", "table", "100"); strings.TrimSpace(out) != "" {
				t.Errorf("ip %s route show table 100 after Remove:\n%s", fam, out)
			}
		}
		if drift, err := verifyIn(h, r); err != nil || len(drift) != 5 {
			t.Errorf("Verify after Remove: %q, %v", drift, err)
		}
		expect(t, "outbound after Remove", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), "node-80")
	})
}
