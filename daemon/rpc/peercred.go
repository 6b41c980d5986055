package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// PeerCreds is transport "security" for a unix socket: it changes no bytes,
// it only records the caller's uid and pid (SO_PEERCRED) at accept, where
// the kernel vouches for them.
type PeerCreds struct{}

// PeerInfo is the AuthInfo of a unix-socket caller.
type PeerInfo struct {
	UID uint32
	PID int32
}

func (PeerInfo) AuthType() string { return "peercred" }

func (PeerCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, nil, fmt.Errorf("peercred: %T is not a unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, nil, fmt.Errorf("peercred: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, nil, fmt.Errorf("peercred: %w", err)
	}
	if credErr != nil {
		return nil, nil, fmt.Errorf("peercred: SO_PEERCRED: %w", credErr)
	}
	return c, PeerInfo{UID: cred.Uid, PID: cred.Pid}, nil
}

func (PeerCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("peercred: server-side only")
}

func (PeerCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}

func (p PeerCreds) Clone() credentials.TransportCredentials { return p }

func (PeerCreds) OverrideServerName(string) error { return nil }

// Authorizer lets only the listed uids call. It guards every service on the
// socket, health and reflection included.
type Authorizer struct {
	AllowedUIDs []uint32
}

func (a Authorizer) check(ctx context.Context) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return status.Error(codes.PermissionDenied, "caller unknown: no peer information")
	}
	info, ok := p.AuthInfo.(PeerInfo)
	if !ok {
		return status.Error(codes.PermissionDenied, "caller unknown: not a unix-socket peer")
	}
	if !slices.Contains(a.AllowedUIDs, info.UID) {
		return status.Errorf(codes.PermissionDenied, "caller uid %d (pid %d) is not allowed; allowed uids: %v", info.UID, info.PID, a.AllowedUIDs)
	}
	return nil
}

func (a Authorizer) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (a Authorizer) Stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := a.check(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}
