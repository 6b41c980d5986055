package kernel

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// sendBareACK sends, from ns, one TCP ACK for a connection that does not
// exist: with nf_conntrack_tcp_loose off, conntrack calls it INVALID.
func sendBareACK(t *testing.T, ns *nstest.NS, src, dst netip.Addr, dport uint16) {
	t.Helper()
	seg := make([]byte, 20)
	binary.BigEndian.PutUint16(seg[0:], 40000)
	binary.BigEndian.PutUint16(seg[2:], dport)
	binary.BigEndian.PutUint32(seg[4:], 1000)
	binary.BigEndian.PutUint32(seg[8:], 2000)
	seg[12] = 5 << 4 // data offset: 5 words
	seg[13] = 0x10   // ACK
	binary.BigEndian.PutUint16(seg[14:], 512)
	// Checksum over the IPv4 pseudo-header and the segment.
	var sum uint32
	pseudo := append(append(src.AsSlice(), dst.AsSlice()...), 0, unix.IPPROTO_TCP, 0, 20)
	for _, b := range [][]byte{pseudo, seg} {
		for i := 0; i < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(seg[16:], ^uint16(sum))
	if err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, seg, 0, &unix.SockaddrInet4{Addr: dst.As4()})
	}); err != nil {
		t.Fatalf("send a bare ACK: %v", err)
	}
}

// tcpOutRsts is the pod's count of resets sent (/proc/net/snmp Tcp OutRsts).
func tcpOutRsts(t *testing.T, ns *nstest.NS) int {
	t.Helper()
	var names []string
	for _, line := range strings.Split(ns.Run(t, "cat", "/proc/net/snmp"), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "OutRsts" {
				v, err := strconv.Atoi(f[i])
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	t.Fatal("no Tcp OutRsts in /proc/net/snmp")
	return 0
}

// TestDropInvalid: an ACK conntrack cannot place reaches the pod's TCP,
// which answers with a reset, unless DropInvalid drops it first. A normal
// connection after the ACK, on the same link, is the point by which the
// ACK has been handled.
func TestDropInvalid(t *testing.T) {
	tp := newTopology(t)
	tp.pod.Run(t, "sysctl", "-qw", "net.netfilter.nf_conntrack_tcp_loose=0")
	pod, node := netip.MustParseAddr(podV4), netip.MustParseAddr(nodeV4)
	for _, tc := range []struct {
		drop  bool
		reset bool
	}{{false, true}, {true, false}} {
		s := redirect.DefaultSpec()
		s.DropInvalid = tc.drop
		mustApply(t, tp, s)
		before := tcpOutRsts(t, tp.pod)
		sendBareACK(t, tp.node, node, pod, 8080)
		expect(t, "a real connection after it", dialFrom(t, tp.node, "tcp", podV4+":8080"), "proxy-in "+podV4+":8080")
		if got := tcpOutRsts(t, tp.pod) > before; got != tc.reset {
			t.Errorf("DropInvalid=%v: pod sent a reset: %v, want %v", tc.drop, got, tc.reset)
		}
	}
}
