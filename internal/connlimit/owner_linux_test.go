package connlimit

import (
	"net"
	"testing"

	vnl "github.com/vishvananda/netlink"
)

// socketOwner's exact lookup answers what the kept library's dump-based
// SocketGet answers, for IPv4 and IPv6, and finds nothing for a socket
// that is not in this namespace's table.
func TestSocketOwnerMatchesSocketGet(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		s, err := accepted(t, addr)
		if err != nil {
			t.Logf("%s: %v: not compared", addr, err) // a host without IPv6 loopback
			continue
		}
		peer, self := s.RemoteAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr)
		got, err := diag.owner(peer.AddrPort(), self.AddrPort())
		if err != nil {
			t.Fatalf("%s: socketOwner: %v", addr, err)
		}
		want, err := vnl.SocketGet(peer, self)
		if err != nil {
			t.Fatalf("%s: SocketGet: %v", addr, err)
		}
		if got != want.UID {
			t.Fatalf("%s: socketOwner = %d, SocketGet = %d", addr, got, want.UID)
		}
		gone := *peer
		gone.Port = self.Port + 1 // no such connection
		if uid, err := diag.owner(gone.AddrPort(), self.AddrPort()); err == nil {
			t.Fatalf("%s: socketOwner of no socket = %d, nil", addr, uid)
		}
	}
}
