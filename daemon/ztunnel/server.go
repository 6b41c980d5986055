// Package ztunnel is the ZDS server: the socket ztunnel connects to in
// ambient mode to be handed each enrolled pod's network namespace.
//
// The protocol (api/zds) is ztunnel's own, so an unmodified ztunnel works:
// one protobuf message per SOCK_SEQPACKET packet, the netns fd riding along
// as SCM_RIGHTS, and an ack for every request. Acks match requests only by
// order, so each connection carries one request at a time, and a connection
// whose ack is late or garbled is dropped rather than left out of step:
// ztunnel reconnects and is sent a full snapshot again.
//
// During a ztunnel upgrade two ztunnels are connected at once. New pods go
// to the newest one; deletions go to both, so the old one lets go of pods it
// still holds.
//
// At most 8 connections at once. A connection is registered as newest
// before its snapshot and holds its lock until the snapshot is acked, so
// Adds and Dels queue behind it. Every deadline set on a connection is
// cleared after its exchange, and the idle keepalive peeks through
// RawConn.Control. A request over 1024 bytes (ztunnel's read buffer) is
// refused before it is written. The snapshot source is read only once the
// journal is loaded; it lists sluice's pods and the pending ones: marked
// ambient.istio.io/redirection=enabled, with no sluice record, in a netns
// holding istio-cni's rules. That list waits for the pod cache (at most 30
// s), and a list that cannot be read drops the connection before any
// snapshot. On exit the agent waits (at most 5 s) for the server to
// unlink its socket. A socket file someone removed is listened on again
// within a second (sockfile.Keep), the ztunnels connected meanwhile kept;
// one replaced by another's socket is left alone and fails liveness.
//
// A CNI ADD that finds no ztunnel waits for one (AwaitConnection), up
// to --ztunnel-connect-wait and at most 16 at once (more fail at once),
// before it takes any lock, the attachment's or the pod's; background
// enrolments retry through their work queues instead. The ack is awaited
// within the call's deadline less 250 ms, capped by the 5 s ZDS timeout.
// A write on a connection that died unnoticed is "no ztunnel connected":
// the ADD rolls back, waits again and hands the pod over once more.
package ztunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/internal/connlimit"
	"github.com/sluicemesh/sluice/internal/sockfile"
)

// DefaultPath is where ztunnel looks for the node agent, on a hostPath both
// pods mount.
const DefaultPath = "/var/run/ztunnel/ztunnel.sock"

// ErrNotConnected is wrapped when no ztunnel is there to take a workload.
var ErrNotConnected = errors.New("no ztunnel connected")

// ErrRefused is wrapped, with ztunnel's reason, when ztunnel acks a request
// with an error.
var ErrRefused = errors.New("ztunnel refused the request")

// Workload is one ambient pod as ztunnel needs it.
type Workload struct {
	UID            string
	Name           string
	Namespace      string
	ServiceAccount string
	Netns          string // path of the pod's network namespace
}

// Config configures a Server. Snapshot and Open are required.
type Config struct {
	// Path of the socket; DefaultPath when empty.
	Path string
	// Snapshot lists every enrolled ambient workload. It is read for each
	// new ztunnel connection, and ztunnel removes every workload the
	// snapshot lacks, so it must be complete: call Run only once the list
	// of enrolled workloads has been loaded.
	Snapshot func() []Workload
	// Pending, when set, lists workloads another node agent enrolled
	// (istio-cni's ambient pods, before this agent adopts them). Each
	// snapshot sends them after Snapshot's, less those Snapshot has, so
	// ztunnel keeps their proxies across the swap. An error sends no
	// snapshot and drops the connection: ztunnel keeps what it holds and
	// reconnects, where a snapshot without them would tear them down.
	Pending func(ctx context.Context) ([]Workload, error)
	// Open opens a workload's netns path; podns.Opener.Open fits. The
	// server closes the handle once it has been sent.
	Open func(path string) (netns.NsHandle, error)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Timeout bounds reading ztunnel's hello, each write and each ack, and
	// a whole Add or Del whose context has no earlier deadline. Default 5s.
	Timeout time.Duration
	// Keepalive is how often an idle connection is checked for a ztunnel
	// that has gone away. Default 5s.
	Keepalive time.Duration
	// ConnectWait is how long AwaitConnection waits for a ztunnel when none is connected. Default Timeout;
	// negative, no wait.
	ConnectWait time.Duration
	// SocketCheck is how often the socket file is looked for, and
	// listened on again when removed. Default sockfile.CheckEvery.
	SocketCheck time.Duration
}

// Server accepts ztunnel connections and sends them workloads.
type Server struct {
	cfg Config
	log *slog.Logger
	ln  *sockfile.Listener

	mu     sync.Mutex
	conns  []*conn // ztunnels that said hello, oldest first
	nextID uint64
	// joined is closed, and replaced, when a ztunnel says hello: it wakes
	// the ADDs waiting for one (AwaitConnection).
	joined chan struct{}
	// waiting holds a slot per ADD waiting for a ztunnel (MaxWaiting).
	waiting chan struct{}
}

// New validates cfg and starts listening on its socket, so that errors show
// at startup; connections are accepted once Run is called.
func New(cfg Config) (*Server, error) {
	if cfg.Snapshot == nil {
		// Without it ztunnel would be told the node has no workloads and
		// tear down every ambient pod's proxy.
		return nil, errors.New("ztunnel server: Config.Snapshot is required")
	}
	if cfg.Open == nil {
		return nil, errors.New("ztunnel server: Config.Open is required")
	}
	if cfg.Path == "" {
		cfg.Path = DefaultPath
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = 5 * time.Second
	}
	if cfg.ConnectWait == 0 {
		cfg.ConnectWait = cfg.Timeout
	}
	if cfg.SocketCheck <= 0 {
		cfg.SocketCheck = sockfile.CheckEvery
	}
	ln, err := listen(cfg.Path)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, log: cfg.Logger.With("socket", cfg.Path), ln: ln,
		joined: make(chan struct{}), waiting: make(chan struct{}, MaxWaiting)}, nil
}

// Run accepts ztunnel connections until ctx is done, then closes the socket
// and every connection and returns nil once they are all closed.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	// Connections end with connCtx, also when Run returns on an error.
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.ln.Close()
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	s.log.Info("serving ztunnel")
	wg.Go(func() { s.ln.Keep(connCtx, s.cfg.SocketCheck, s.socketRestored) })
	ln := connlimit.Listener(s.ln, MaxConnections)
	for {
		lc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept ztunnel connections on %s: %w", s.cfg.Path, err)
			}
			// EMFILE and friends pass; don't spin on them.
			s.log.Warn("accept ztunnel connection", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		c := s.newConn(lc.(*connlimit.Conn).Unwrap().(*net.UnixConn))
		wg.Go(func() {
			defer lc.Close() // gives the slot back
			s.serve(connCtx, c)
		})
	}
}

// Connections is the number of ztunnels connected (after their hello).
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.conns {
		if !c.dropped() {
			n++
		}
	}
	return n
}

// Accepted is how many connections ztunnel has opened to the agent since
// it started. On a steady node it stays put: a rise without a ztunnel
// restart is a reconnect, which the Connections gauge, back at 1 within a
// millisecond, does not show.
func (s *Server) Accepted() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextID
}

// Ready reports whether some ztunnel is connected and has acked its
// snapshot, and why not.
func (s *Server) Ready() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := 0
	for _, c := range s.conns {
		if c.dropped() {
			continue
		}
		live++
		if c.synced.Load() {
			return true, ""
		}
	}
	if live > 0 {
		return false, "ztunnel connected but has not acked its snapshot yet"
	}
	return false, fmt.Sprintf("no ztunnel connected on %s", s.cfg.Path)
}

func (s *Server) newConn(uc *net.UnixConn) *conn {
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.mu.Unlock()
	return newConn(uc, s.log.With("conn", id), s.cfg.Timeout)
}

func (s *Server) register(c *conn) {
	s.mu.Lock()
	s.conns = append(s.conns, c)
	close(s.joined)
	s.joined = make(chan struct{})
	s.mu.Unlock()
	c.log.Info("ztunnel connected", "connections", s.Connections())
}

func (s *Server) unregister(c *conn) {
	s.mu.Lock()
	s.conns = slices.DeleteFunc(s.conns, func(o *conn) bool { return o == c })
	s.mu.Unlock()
	c.log.Info("ztunnel gone", "connections", s.Connections())
}

// newest is the connection new workloads go to, or nil and the channel
// the next hello closes.
func (s *Server) newest() (*conn, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range slices.Backward(s.conns) {
		if !c.dropped() {
			return c, nil
		}
	}
	return nil, s.joined
}

func (s *Server) live() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(s.conns), (*conn).dropped)
}
