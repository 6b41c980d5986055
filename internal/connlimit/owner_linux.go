package connlimit

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ByIPAndLocalOwner classifies a connection by its remote address and, when
// the peer is a process of this network namespace, by the uid that owns the
// peer's socket too; a root-owned local peer (the kubelet) is served first.
// A listener on the node's network (the health port of a hostNetwork agent)
// sees the kubelet's probes, every local process and every hostNetwork pod
// come from the same node address: keyed by address alone, a local
// unprivileged user holding a few slow connections took the kubelet's
// bucket and failed every probe. The owner comes from the kernel's socket
// table (sock_diag), not from anything the peer says; a peer in another
// namespace (a pod, another node) is not in that table and is keyed by its
// address alone.
//
// The lookups share one sock_diag socket, opened on first use in the
// namespace of the thread that first keys a connection (the listener's:
// Listen's caller opens the listener there too), so an accept costs two
// syscalls, not five.
func ByIPAndLocalOwner(c net.Conn) Peer {
	ip := remoteIP(c)
	peer, ok1 := c.RemoteAddr().(*net.TCPAddr)
	self, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return Peer{Bucket: ip}
	}
	uid, err := diag.owner(peer.AddrPort(), self.AddrPort())
	if err != nil {
		return Peer{Bucket: ip}
	}
	return Peer{Bucket: ip + " uid " + strconv.FormatUint(uint64(uid), 10), First: uid == 0}
}

// diag is the process's sock_diag socket for ByIPAndLocalOwner.
var diag diagConn

type diagConn struct {
	mu   sync.Mutex
	conn *netlink.Conn
}

func (d *diagConn) owner(src, dst netip.AddrPort) (uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn == nil {
		conn, err := netlink.Dial(unix.NETLINK_SOCK_DIAG, nil)
		if err != nil {
			return 0, err
		}
		d.conn = conn
	}
	uid, err := socketOwner(d.conn, src, dst)
	var nerr *netlink.OpError
	if err != nil && !errors.As(err, &nerr) {
		// Not the kernel's answer about the socket: the netlink socket
		// itself may be broken; the next lookup opens a new one.
		d.conn.Close()
		d.conn = nil
	}
	return uid, err
}

// socketOwner asks the kernel for the uid owning the TCP socket bound to
// src and connected to dst, by an exact lookup (one hash probe, not a dump
// of every socket: a dump per accepted connection made a flood of many
// local connections starve the accept loop).
func socketOwner(conn *netlink.Conn, src, dst netip.AddrPort) (uint32, error) {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	family := uint8(unix.AF_INET6)
	if src.Addr().Is4() && dst.Addr().Is4() {
		family = unix.AF_INET
	} else if src.Addr().Is4() != dst.Addr().Is4() {
		return 0, errors.New("mixed address families")
	}
	msgs, err := conn.Execute(netlink.Message{
		Header: netlink.Header{Type: sockDiagByFamily, Flags: netlink.Request},
		Data:   diagRequest(family, src, dst),
	})
	if err != nil {
		return 0, err
	}
	if len(msgs) != 1 || len(msgs[0].Data) < diagMsgUIDOffset+4 {
		return 0, errors.New("unexpected sock_diag answer")
	}
	return binary.NativeEndian.Uint32(msgs[0].Data[diagMsgUIDOffset:]), nil
}

// The kernel's sock_diag ABI (linux/inet_diag.h): struct inet_diag_req_v2
// is family, protocol, ext, pad, states, then struct inet_diag_sockid
// (ports and addresses in network order, interface, cookie); the answer,
// struct inet_diag_msg, has the owner's uid after the four bytes of kind,
// the 48 of the sockid and the three u32s of expires and queue sizes.
const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	diagMsgUIDOffset = 4 + 48 + 12
	noCookie         = 0xffffffff
)

func diagRequest(family uint8, src, dst netip.AddrPort) []byte {
	b := make([]byte, 56)
	b[0], b[1] = family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(b[4:], 0xffffffff) // every state
	id := b[8:]
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	putAddr(id[4:20], src.Addr())
	putAddr(id[20:36], dst.Addr())
	binary.NativeEndian.PutUint32(id[40:], noCookie)
	binary.NativeEndian.PutUint32(id[44:], noCookie)
	return b
}

func putAddr(b []byte, a netip.Addr) {
	if a.Is4() {
		v := a.As4()
		copy(b, v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}
