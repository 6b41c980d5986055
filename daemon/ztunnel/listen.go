package ztunnel

import (
	"github.com/sluicemesh/sluice/internal/sockfile"
)

// MaxConnections bounds the ZDS connections open at once (ztunnel needs one,
// two during its upgrade); more wait in the kernel's backlog. A connection
// that never says hello is dropped after Timeout.
const MaxConnections = 8

// listen opens the SOCK_SEQPACKET socket ztunnel dials. Whoever connects is
// handed every ambient pod's network namespace, so it is root-only
// (ztunnel runs as root), and its directory must be the agent's own: a
// hostPath the ztunnel pod mounts too, created 0755 when missing (ztunnel,
// root, needs no more), else owned by the agent's uid and writable by no
// one else, or the agent refuses to start (sockfile, dirlock.Own): in a
// directory others may write to, anyone could put their own socket in its
// place and be handed ztunnel's hello. A sluice server registers a ztunnel
// only after its hello, so the stale-socket probe is never mistaken for one.
func listen(path string) (*sockfile.Listener, error) {
	return sockfile.Listen("unixpacket", path, 0o755)
}

// SocketOurs is a liveness check: false once the socket file was replaced,
// when no restarted ztunnel can reach this agent any more; a removed one is
// false only until Run listens again (within Config.SocketCheck).
func (s *Server) SocketOurs() (bool, string) { return s.ln.Ours() }

// Close closes the socket of a server whose Run never ran (a failed
// start); Run closes it itself. Closing twice does nothing.
func (s *Server) Close() error { return s.ln.Close() }

// SocketRestores is how many times the socket file was found removed and
// listened on again. The ztunnels connected meanwhile stay connected.
func (s *Server) SocketRestores() uint64 { return s.ln.Restored() }

func (s *Server) socketRestored(err error) {
	if err != nil {
		s.log.Error("ZDS socket removed; cannot listen again (retrying)", "err", err)
		return
	}
	s.log.Warn("ZDS socket removed; listening again", "restores", s.ln.Restored())
}
