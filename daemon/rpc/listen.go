package rpc

import (
	"context"
	"net"

	"github.com/sluicemesh/sluice/internal/connlimit"
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
	sock *sockfile.Listener
}

// Listen opens the agent's unix socket (0600). Its directory must be the
// agent's own: created 0700 when missing, else owned by the agent's uid and
// writable by no one else; a shared directory is refused, never tightened.
// Closing it removes the file only while it is still ours, never another
// agent's that took the path.
func Listen(path string) (*Listener, error) {
	l, err := sockfile.Listen("unix", path, 0o700)
	if err != nil {
		return nil, err
	}
	return &Listener{Listener: connlimit.Listener(l, MaxConnections), sock: l}, nil
}

// Ours is a liveness check: false once the socket file was replaced, when
// no plugin can reach this agent any more; a removed one is false only
// until Keep listens again.
func (l *Listener) Ours() (bool, string) { return l.sock.Ours() }

// Keep listens again, until ctx is done, whenever the socket file is found
// removed (sockfile.Keep, every sockfile.CheckEvery): without it every ADD
// would wait out its deadline and fail until the agent restarted. report
// hears each restore (nil) and each new failure to restore.
func (l *Listener) Keep(ctx context.Context, report func(error)) {
	l.sock.Keep(ctx, sockfile.CheckEvery, report)
}

// Restored is how many times the socket file was listened on again.
func (l *Listener) Restored() uint64 { return l.sock.Restored() }
