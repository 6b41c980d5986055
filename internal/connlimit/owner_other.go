//go:build !linux

package connlimit

import "net"

// ByIPAndLocalOwner is ByIP where the kernel's socket table cannot be read.
func ByIPAndLocalOwner(c net.Conn) Peer { return ByIP(c) }
