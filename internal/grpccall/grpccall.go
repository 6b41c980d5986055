// Package grpccall makes one gRPC unary call on a connection of its own over
// a unix socket: what the sluice plugin does once per exec.
//
// The plugin used grpc-go's client. On every pod start that linked a
// channel (resolver, balancer, callback serializers, a reader goroutine,
// channelz) and the protobuf runtime, and their package inits alone cost
// more CPU than the reference loopback plugin's whole ADD (the plugin
// rows of docs/benchmarks.md; the decision in docs/decisions.md). This
// package speaks only what one unary call needs: HTTP/2 framing (RFC 9113)
// with x/net's HPACK, gRPC's length-prefixed message and its
// grpc-status/grpc-message trailers. The agent keeps grpc-go's server;
// tests hold this client to it (interop), and FuzzAnswerOracle to
// x/net/http2's Framer: the same server bytes through both must give the
// same answer or both an error, so the framing rules here are the
// library's, not a reading of the RFC of their own.
package grpccall

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
)

// MaxResponseBytes bounds one answer, as grpc-go's client default does.
const MaxResponseBytes = 4 << 20

// Status is a call that ended with a gRPC status other than OK, from the
// server or from this side (no connection, deadline, broken protocol).
type Status struct {
	Code    codes.Code
	Message string
	// Answered is true when the server sent this status: it took and ran
	// the call. A status made on this side (no connection, deadline,
	// broken protocol) leaves it false.
	Answered bool
	// cause is the dial's error, when there was no connection.
	cause error
}

// Unwrap is the dial's error behind a status made for want of a
// connection, nil otherwise.
func (s *Status) Unwrap() error { return s.cause }

// NotListening says whether err is a call that found no server at the
// socket: no file there, or nothing accepting on it (a server that has
// exited or not yet started). Any other failure, a refused permission
// included, is not.
func NotListening(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// Error reads as grpc-go's status errors do, so logs look the same.
func (s *Status) Error() string {
	return fmt.Sprintf("rpc error: code = %s desc = %s", s.Code, s.Message)
}

// Code is err's gRPC code: OK for nil, Unknown for an error that is not a
// Status.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	var st *Status
	if errors.As(err, &st) {
		return st.Code
	}
	return codes.Unknown
}

func newStatus(c codes.Code, format string, a ...any) *Status {
	return &Status{Code: c, Message: fmt.Sprintf(format, a...)}
}

// Call sends req (a marshalled message) to method (e.g.
// "/sluice.v1.CNI/Add") on the server listening on the unix socket and
// returns the marshalled answer. Every failure is a *Status. ctx bounds the
// whole call: dial, write and read. md goes with the request headers.
func Call(ctx context.Context, socket, method string, req []byte, md ...Header) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, ctxStatus(err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxStatus(ctx.Err())
		}
		st := newStatus(codes.Unavailable, "connection error: %v", err)
		st.cause = err
		return nil, st
	}
	defer conn.Close()
	return call(ctx, conn, method, req, md)
}

// call is Call on a connected conn.
func call(ctx context.Context, conn net.Conn, method string, req []byte, md []Header) ([]byte, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// A cancelled ctx unblocks a read or write in progress.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	resp, err := newStream(ctx, conn, method, md).run(req)
	if err != nil && ctx.Err() != nil {
		return nil, ctxStatus(ctx.Err())
	}
	return resp, err
}

func ctxStatus(err error) *Status {
	if errors.Is(err, context.DeadlineExceeded) {
		return newStatus(codes.DeadlineExceeded, "context deadline exceeded")
	}
	return newStatus(codes.Canceled, "context canceled")
}

// connError is a failed read or write of the connection itself: the agent
// went away or reset it. Retrying may succeed, as grpc-go says too.
func connError(err error) *Status {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return newStatus(codes.DeadlineExceeded, "context deadline exceeded")
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return newStatus(codes.Unavailable, "connection reset by the server: %v", err)
	}
	return newStatus(codes.Unavailable, "error reading from or writing to the server: %v", err)
}

// protocolError is an answer that breaks HTTP/2 or gRPC: nothing a retry
// would fix, and never read as success.
func protocolError(format string, a ...any) *Status {
	return newStatus(codes.Internal, "the server's answer breaks the protocol: "+format, a...)
}
