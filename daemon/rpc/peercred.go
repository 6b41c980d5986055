package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Authorizer lets only the listed uids use the socket. It decides at the
// handshake, from SO_PEERCRED, before any HTTP/2 transport exists: a
// refused peer never gets a stream, a buffer or a goroutine of the server
// (the socket's 0600 mode is the first wall; this is the one that holds
// when someone loosens it). It guards every service, health and reflection
// included.
type Authorizer struct {
	allowed []uint32
	log     *slog.Logger
	refused atomic.Int64

	mu      sync.Mutex
	lastLog time.Time
}

// NewAuthorizer admits uids; refusals are counted and logged to log (at
// most one line a second, with the running count).
func NewAuthorizer(uids []uint32, log *slog.Logger) *Authorizer {
	return &Authorizer{allowed: slices.Clone(uids), log: log}
}

// Refused counts the connections refused at the handshake.
func (a *Authorizer) Refused() int64 { return a.refused.Load() }

// PeerInfo is the AuthInfo of an admitted unix-socket caller.
type PeerInfo struct {
	UID uint32
	PID int32
}

func (PeerInfo) AuthType() string { return "peercred" }

// peerCreds is transport "security" for a unix socket: it changes no bytes,
// it reads the caller's uid and pid (SO_PEERCRED), which the kernel vouches
// for, and refuses a uid that is not allowed.
type peerCreds struct{ auth *Authorizer }

func (p peerCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cred, err := ucred(c)
	if err != nil {
		p.auth.refuse("no peer credentials", -1, -1, err)
		return nil, nil, err
	}
	if !slices.Contains(p.auth.allowed, cred.Uid) {
		err := fmt.Errorf("peercred: uid %d (pid %d) is not allowed; allowed uids: %v", cred.Uid, cred.Pid, p.auth.allowed)
		p.auth.refuse("uid not allowed", int64(cred.Uid), cred.Pid, err)
		return nil, nil, err
	}
	return c, PeerInfo{UID: cred.Uid, PID: cred.Pid}, nil
}

func ucred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		if w, isWrapped := c.(interface{ Unwrap() net.Conn }); isWrapped {
			return ucred(w.Unwrap())
		}
		return nil, fmt.Errorf("peercred: %T is not a unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peercred: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("peercred: %w", err)
	}
	if credErr != nil {
		return nil, fmt.Errorf("peercred: SO_PEERCRED: %w", credErr)
	}
	return cred, nil
}

func (a *Authorizer) refuse(why string, uid int64, pid int32, err error) {
	n := a.refused.Add(1)
	a.mu.Lock()
	quiet := time.Since(a.lastLog) < time.Second
	if !quiet {
		a.lastLog = time.Now()
	}
	a.mu.Unlock()
	if !quiet && a.log != nil {
		a.log.Warn("refused a connection on the agent socket", "why", why, "uid", uid, "pid", pid,
			"refused_total", n, "err", err)
	}
}

func (peerCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("peercred: server-side only")
}

func (peerCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}

func (p peerCreds) Clone() credentials.TransportCredentials { return p }

func (peerCreds) OverrideServerName(string) error { return nil }

// check is the second look, per call: the handshake admitted the peer, so
// this fails only if the transport was not ours.
func (a *Authorizer) check(ctx context.Context) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Error(codes.PermissionDenied, "caller unknown: no peer information")
	}
	info, ok := p.AuthInfo.(PeerInfo)
	if !ok {
		return status.Error(codes.PermissionDenied, "caller unknown: not a unix-socket peer")
	}
	if !slices.Contains(a.allowed, info.UID) {
		return status.Errorf(codes.PermissionDenied, "caller uid %d (pid %d) is not allowed; allowed uids: %v", info.UID, info.PID, a.allowed)
	}
	return nil
}

func (a *Authorizer) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (a *Authorizer) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := a.check(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}
