package rpc

import (
	"fmt"
	"net"
	"path/filepath"
	"sync"

	"github.com/sluicemesh/sluice/internal/dirlock"
	"github.com/sluicemesh/sluice/internal/sockfile"
)

// MaxConnections bounds the open connections on the agent socket; more wait
// in the kernel's backlog (the plugin's deadline still runs) until one
// closes. A refused peer's connection closes at its handshake.
const MaxConnections = 256

// Listener is the agent's socket: bounded in connections, and able to tell
// whether its path still names it.
type Listener struct {
	net.Listener
	stamp sockfile.Stamp
}

// Listen opens the agent's unix socket (0600). Its directory must be the
// agent's own: created 0700 when missing, else owned by the agent's uid and
// writable by no one else; a shared directory is refused, never tightened.
func Listen(path string) (*Listener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("socket path %q is not absolute", path)
	}
	if err := dirlock.Own(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	l, err := sockfile.Listen("unix", path, 0o700)
	if err != nil {
		return nil, err
	}
	// On exit the file is removed only while it is still ours
	// (removeIfOurs), never another agent's that took the path.
	l.SetUnlinkOnClose(false)
	stamp, err := sockfile.NewStamp(path)
	if err != nil {
		l.Close()
		return nil, err
	}
	return &Listener{Listener: limit(l, MaxConnections), stamp: stamp}, nil
}

// Ours is a liveness check: false once the socket file was removed or
// replaced, when no plugin can reach this agent any more.
func (l *Listener) Ours() (bool, string) {
	if err := l.stamp.Check(); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// limit makes Accept wait while n connections are open.
func limit(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n)}
}

type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, release: func() { <-l.slots }}, nil
}

// slotConn gives its slot back on the first Close.
type slotConn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Unwrap gives the peer-credential check the unix socket underneath.
func (c *slotConn) Unwrap() net.Conn { return c.Conn }
