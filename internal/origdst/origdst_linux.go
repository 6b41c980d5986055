package origdst

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/
// ip6_tables.h, the IPv6 twin of SO_ORIGINAL_DST; x/sys/unix has no name
// for it.
const ip6tSOOriginalDst = 80

// Get returns c's original destination as conntrack recorded it before
// REDIRECT (SO_ORIGINAL_DST at SOL_IP for IPv4, IP6T_SO_ORIGINAL_DST at
// SOL_IPV6 for IPv6). The kernel answers with a sockaddr whose port is in
// network byte order. For a tracked connection that was not redirected it
// is simply the address dialled (the socket's local address); with no
// conntrack entry at all the kernel answers ENOENT.
func Get(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination of %v: %w", c.LocalAddr(), err)
	}
	local, _ := c.LocalAddr().(*net.TCPAddr)
	v6 := local != nil && local.IP.To4() == nil
	var (
		dst  netip.AddrPort
		serr error
	)
	err = raw.Control(func(fd uintptr) {
		if v6 {
			dst, serr = getV6(int(fd))
		} else {
			dst, serr = getV4(int(fd))
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination of %v: %w", c.LocalAddr(), err)
	}
	return dst, nil
}

func getV4(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet4
	if err := getsockopt(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: %w", err)
	}
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port(sa.Port)), nil
}

func getV6(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet6
	if err := getsockopt(fd, unix.SOL_IPV6, ip6tSOOriginalDst, unsafe.Pointer(&sa), unsafe.Sizeof(sa)); err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockopt IP6T_SO_ORIGINAL_DST: %w", err)
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port(sa.Port)), nil
}

// port undoes the network byte order of a raw sockaddr's port field, which
// Go reads as a host-order uint16.
func port(p uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], p)
	return binary.BigEndian.Uint16(b[:])
}

// getsockopt is the raw syscall: x/sys/unix has no getter for a struct of
// caller-chosen size at an arbitrary level.
func getsockopt(fd, level, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
