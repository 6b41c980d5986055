package rpc

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/pluginconf"
)

// Bounds of the server, so a caller (allowed or not) cannot grow the agent
// without limit. A CNI request is a few KiB and one call is one stream on
// its own connection.
const (
	// MaxRequestBytes bounds every request (the plugin checks the same).
	MaxRequestBytes = pluginconf.MaxRequestBytes
	// MaxStreamsPerConn bounds concurrent calls on one connection.
	MaxStreamsPerConn = 16
	// maxHeaderBytes bounds one call's HTTP/2 header list.
	maxHeaderBytes = 64 << 10
	// windowBytes fixes the flow-control windows (no growth by BDP
	// estimation): what a stream or connection may have buffered unread.
	streamWindowBytes = 64 << 10
	connWindowBytes   = 1 << 20
	// maxConnAge (and its grace) bound how long any connection, and so a
	// request never finished, holds the agent: longer than the plugin's
	// longest deadline.
	maxConnAge      = 2 * time.Minute
	maxConnAgeGrace = 70 * time.Second
	maxConnIdle     = time.Minute
	handshakeWithin = 5 * time.Second
)

// connBufferBytes sizes each connection's transport read and write buffers.
const connBufferBytes = 4 << 10

// streamWorkers is how many goroutines serve calls and are kept between
// them: a few per core, as the kernel work under a call is mostly CPU.
func streamWorkers() uint32 { return uint32(max(8, 2*runtime.NumCPU())) }

// NewServer builds the gRPC server with every service registered: CNI,
// Debug, grpc.health.v1 and reflection, all behind auth, which refuses a
// disallowed peer at the handshake. observe, when non-nil, sees every
// unary call after the uid check (metrics).
func NewServer(cni *CNI, debug *Debug, auth *Authorizer, observe grpc.UnaryServerInterceptor, log *slog.Logger) (*grpc.Server, *health.Server) {
	unary := []grpc.UnaryServerInterceptor{auth.unary, traceCalls(), logCalls(log)}
	if observe != nil {
		unary = append(unary, observe)
	}
	gs := grpc.NewServer(
		grpc.Creds(peerCreds{auth}),
		grpc.ConnectionTimeout(handshakeWithin),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.MaxConcurrentStreams(MaxStreamsPerConn),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		grpc.InitialWindowSize(streamWindowBytes),
		grpc.InitialConnWindowSize(connWindowBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     maxConnIdle,
			MaxConnectionAge:      maxConnAge,
			MaxConnectionAgeGrace: maxConnAgeGrace,
		}),
		// Every plugin exec is a new connection for one small call: 4 KiB
		// buffers instead of 32 KiB each per connection; grpc-go already
		// shares the write buffer from a pool while idle (docs/benchmarks.md).
		grpc.ReadBufferSize(connBufferBytes),
		grpc.WriteBufferSize(connBufferBytes),
		// A call's stack grows to tens of KiB (netlink, the nftables
		// batch); a fresh goroutine per call copied it up on every ADD,
		// ~8 % of the agent's CPU. Workers keep their grown stacks; calls
		// beyond them still get a goroutine each.
		grpc.NumStreamWorkers(streamWorkers()),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.StreamInterceptor(auth.stream),
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
			logWarnings(log, attrs, w.GetWarnings())
		}
		switch {
		case err != nil:
			log.Warn("call failed", append(attrs, "err", err)...)
		case quiet(info.FullMethod):
			log.Debug("call", attrs...)
		default:
			log.Info("call", attrs...)
		}
		return resp, err
	}
}

// At most maxWarnings of a call's plugin warnings are logged, each cut to
// maxWarningBytes, and then one line with how many more there were: a
// config with thousands of unknown keys must not flood the agent's log.
const (
	maxWarnings     = 8
	maxWarningBytes = 512
)

func logWarnings(log *slog.Logger, attrs []any, warnings []string) {
	for i, warning := range warnings {
		if i == maxWarnings {
			log.Warn("plugin warnings dropped", append(slices.Clone(attrs), "dropped", len(warnings)-maxWarnings)...)
			return
		}
		if len(warning) > maxWarningBytes {
			warning = warning[:maxWarningBytes] + "…(cut)"
		}
		log.Warn("plugin warning", append(slices.Clone(attrs), "warning", warning)...)
	}
}

// quiet calls are polled (the kubelet's probes, the runtime's STATUS,
// `sluice-agent status`, grpcurl): at info they would be most of the log.
// Only ADD, DEL, CHECK and GC change or report a pod.
func quiet(method string) bool {
	switch method {
	case "/sluice.v1.CNI/Add", "/sluice.v1.CNI/Del", "/sluice.v1.CNI/Check", "/sluice.v1.CNI/GC":
		return false
	}
	return true
}
