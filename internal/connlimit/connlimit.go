// Package connlimit bounds the connections a listener has open at once.
// Listener's Accept waits while the bound is reached, so more callers wait
// in the kernel's backlog under their own deadlines instead of each costing
// the process a goroutine and buffers (the agent socket, the ZDS socket:
// their callers are few and local). Fair accepts at once and serves a
// trusted peer ahead of a queue (the health port, open to the node's
// network).
package connlimit

import (
	"net"
	"sync"
)

// Listener makes Accept wait while n connections are open.
func Listener(l net.Listener, n int) net.Listener {
	return &listener{Listener: l, slots: make(chan struct{}, n)}
}

type listener struct {
	net.Listener
	slots chan struct{}
}

func (l *listener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &Conn{Conn: c, release: func() { <-l.slots }}, nil
}

// Conn gives its slot back on the first Close.
type Conn struct {
	net.Conn
	release func()
	once    sync.Once
}

// Close closes the connection and frees its slot.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Unwrap gives the connection underneath (a peer-credential check needs
// the unix socket).
func (c *Conn) Unwrap() net.Conn { return c.Conn }
