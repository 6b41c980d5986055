package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/pluginconf"
)

// apiVersion is the wire contract this plugin speaks.
const apiVersion = sluicev1.ApiVersion_API_VERSION_2

// connBufferBytes sizes the connection's read and write buffers.
const connBufferBytes = 4 << 10

// agent is one connection to sluice-agent, used for a single CNI call.
type agent struct {
	conn   *grpc.ClientConn
	cni    sluicev1.CNIClient
	socket string
}

func dial(socket string) (*agent, error) {
	// The socket is local and root-only; transport security would add
	// nothing but handshake time to every pod start.
	// One small unary call per exec: 4 KiB transport buffers instead of
	// grpc-go's 32 KiB each are less to allocate and fault in, and still
	// hold a whole CNI request (docs/benchmarks.md).
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(refuseOversize),
		grpc.WithReadBufferSize(connBufferBytes), grpc.WithWriteBufferSize(connBufferBytes))
	if err != nil {
		return nil, types.NewError(types.ErrTryAgainLater, fmt.Sprintf("sluice-agent at %s: %v", socket, err), "")
	}
	return &agent{conn: conn, cni: sluicev1.NewCNIClient(conn), socket: socket}, nil
}

func (a *agent) Close() { a.conn.Close() }

// callError turns a failed call into a CNI error that names the socket and
// the cause. Anything that may pass on retry is "try again later" (11), so
// the runtime retries the pod instead of giving up on it.
func (a *agent) callError(ctx context.Context, verb string, err error) *types.Error {
	var big *oversizeError
	if errors.As(err, &big) {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("sluice %s: %v", verb, big), "")
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Canceled, codes.Aborted:
		cause := st.Message()
		if ctx.Err() != nil {
			if dl, ok := ctx.Deadline(); ok {
				cause = fmt.Sprintf("no answer before the plugin's deadline (%s)", dl.Format("15:04:05.000"))
			}
		}
		what := "is not available"
		if st.Code() == codes.ResourceExhausted || st.Code() == codes.Aborted {
			what = "cannot take the call now" // busy, or its state dir is full: it said which
		}
		return types.NewError(types.ErrTryAgainLater,
			fmt.Sprintf("sluice %s: sluice-agent at %s %s: %s", verb, a.socket, what, cause), "")
	case codes.InvalidArgument:
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("sluice %s: refused by sluice-agent: %s", verb, st.Message()), "")
	default:
		return types.NewError(types.ErrInternal,
			fmt.Sprintf("sluice %s: sluice-agent at %s: %s: %s", verb, a.socket, st.Code(), st.Message()), "")
	}
}

// oversizeError is a request the agent would refuse for its size: the
// network config or prevResult is too large. Retrying cannot help.
type oversizeError struct{ size int }

func (e *oversizeError) Error() string {
	return fmt.Sprintf("the request to sluice-agent is %d bytes, more than its limit of %d: the network config or prevResult is too large", e.size, pluginconf.MaxRequestBytes)
}

// refuseOversize stops a request the agent's size limit would refuse before
// it is sent.
func refuseOversize(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if m, ok := req.(proto.Message); ok {
		if n := proto.Size(m); n > pluginconf.MaxRequestBytes {
			return &oversizeError{n}
		}
	}
	return invoke(ctx, method, req, reply, cc, opts...)
}

// reachable reports whether an error means the agent could not be asked at
// all (as opposed to answering with a refusal).
func reachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

// newRequestID tags one CNI call; the plugin and the agent both log it.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
