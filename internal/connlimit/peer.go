package connlimit

import (
	"net"
	"sync"
)

// Key names the bucket a connection counts in.
type Key func(net.Conn) string

// PerPeer makes one bucket (key of a connection: a remote IP, say) hold at
// most n of l's open connections; a connection past that is closed as soon
// as it is accepted. Under Listener's bound it keeps one peer (a pod
// flooding the health port) from taking every slot.
func PerPeer(l net.Listener, n int, key Key) net.Listener {
	return &perPeer{Listener: l, max: n, key: key, open: map[string]int{}}
}

type perPeer struct {
	net.Listener
	max  int
	key  Key
	mu   sync.Mutex
	open map[string]int
}

func (l *perPeer) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := l.key(c)
		if l.take(peer) {
			return &Conn{Conn: c, release: func() { l.give(peer) }}, nil
		}
		c.Close()
	}
}

func (l *perPeer) take(peer string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[peer] >= l.max {
		return false
	}
	l.open[peer]++
	return true
}

func (l *perPeer) give(peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[peer]--; l.open[peer] <= 0 {
		delete(l.open, peer)
	}
}

// ByIP keys a connection by its remote address without the port (the whole
// address when it has none).
func ByIP(c net.Conn) string {
	addr := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}
