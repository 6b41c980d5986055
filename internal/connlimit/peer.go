package connlimit

import "net"

// ByIP classifies a connection by its remote address without the port (the
// whole address when it has none); no peer is served first.
func ByIP(c net.Conn) Peer {
	return Peer{Bucket: remoteIP(c)}
}

func remoteIP(c net.Conn) string {
	addr := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}
