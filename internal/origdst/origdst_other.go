//go:build !linux

package origdst

import (
	"errors"
	"net"
	"net/netip"
)

// Get needs Linux conntrack; elsewhere there is no original destination.
func Get(c *net.TCPConn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.ErrUnsupported
}
