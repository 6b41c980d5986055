package rpc

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// MaxRequestBytes bounds every request; a CNI request is a few KiB.
const MaxRequestBytes = 1 << 20

// connBufferBytes sizes each connection's transport read and write buffers.
const connBufferBytes = 4 << 10

// NewServer builds the gRPC server with every service registered: CNI,
// Debug, grpc.health.v1 and reflection, all behind the peer-uid check.
// observe, when non-nil, sees every unary call after the uid check (metrics).
func NewServer(cni *CNI, debug *Debug, auth Authorizer, observe grpc.UnaryServerInterceptor, log *slog.Logger) (*grpc.Server, *health.Server) {
	unary := []grpc.UnaryServerInterceptor{auth.Unary, logCalls(log)}
	if observe != nil {
		unary = append(unary, observe)
	}
	gs := grpc.NewServer(
		grpc.Creds(PeerCreds{}),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		// Every plugin exec is a new connection for one small call: 4 KiB
		// buffers, and a write buffer shared from a pool while idle,
		// instead of 32 KiB each per connection (docs/benchmarks.md).
		grpc.ReadBufferSize(connBufferBytes),
		grpc.WriteBufferSize(connBufferBytes),
		grpc.SharedWriteBuffer(true),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.StreamInterceptor(auth.Stream),
	)
	sluicev1.RegisterCNIServer(gs, cni)
	sluicev1.RegisterDebugServer(gs, debug)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	return gs, hs
}

// callFields is what the CNI requests have in common for logging.
type callFields interface {
	GetContainerId() string
	GetRequestId() string
	GetPod() *sluicev1.PodRef
}

// logCalls writes one line per CNI call: verb, pod, container, result,
// duration and the plugin's request id, so plugin and agent lines join up.
func logCalls(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		attrs := []any{"method", info.FullMethod, "code", status.Code(err).String(), "duration", time.Since(start)}
		if f, ok := req.(callFields); ok {
			attrs = append(attrs, "request_id", f.GetRequestId(), "container_id", f.GetContainerId(),
				"pod", f.GetPod().GetNamespace()+"/"+f.GetPod().GetName())
		} else if r, ok := req.(interface{ GetRequestId() string }); ok {
			attrs = append(attrs, "request_id", r.GetRequestId())
		}
		if w, ok := req.(interface{ GetWarnings() []string }); ok {
			for _, warning := range w.GetWarnings() {
				log.Warn("plugin warning", append(attrs[:0:0], append(attrs, "warning", warning)...)...)
			}
		}
		if err != nil {
			log.Warn("call failed", append(attrs, "err", err)...)
		} else {
			log.Info("call", attrs...)
		}
		return resp, err
	}
}
