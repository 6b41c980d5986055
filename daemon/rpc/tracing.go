package rpc

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// tracer is the global provider's (daemon/tracing sets it; until then and
// without tracing it records nothing).
var tracer = otel.Tracer("github.com/sluicemesh/sluice/daemon/rpc")

// tracedMethods are the verbs that act on a pod: one trace per pod start
// is the point; STATUS and GC come on the runtime's own schedule.
var tracedMethods = map[string]bool{
	sluicev1.CNI_Add_FullMethodName: true, sluicev1.CNI_Del_FullMethodName: true, sluicev1.CNI_Check_FullMethodName: true,
}

// traceCalls makes a server span of each pod verb, the child of the
// traceparent the plugin forwarded from the runtime (W3C Trace Context; no
// traceparent starts a trace of its own). Attributes are computed only for
// a span that records.
func traceCalls() grpc.UnaryServerInterceptor {
	prop := propagation.TraceContext{}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if !tracedMethods[info.FullMethod] {
			return h(ctx, req)
		}
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = prop.Extract(ctx, metadataCarrier(md))
		}
		name := strings.TrimPrefix(info.FullMethod, "/")
		ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if span.IsRecording() {
			service, method, _ := strings.Cut(name, "/")
			span.SetAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", service),
				attribute.String("rpc.method", method))
			if f, ok := req.(callFields); ok {
				span.SetAttributes(podAttributes(f)...)
			}
		}
		resp, err := h(ctx, req)
		if err != nil && span.IsRecording() {
			st := status.Convert(err)
			span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st.Code())))
			span.SetStatus(otelcodes.Error, st.Message())
		}
		return resp, err
	}
}

// podAttributes name the pod in OpenTelemetry's Kubernetes and container
// terms, and the plugin's request id, which its log lines and the pod's
// Event carry too.
func podAttributes(f callFields) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("k8s.pod.name", f.GetPod().GetName()),
		attribute.String("k8s.namespace.name", f.GetPod().GetNamespace()),
		attribute.String("k8s.pod.uid", f.GetPod().GetUid()),
		attribute.String("container.id", f.GetContainerId()),
		attribute.String("sluice.request_id", f.GetRequestId()),
	}
}

// startSpan starts a child of ctx's span for one step of a call.
func startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	return tracer.Start(ctx, name)
}

// endSpan ends a step's span, marked failed with err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}

// metadataCarrier reads the W3C headers from gRPC's metadata, whose keys
// are lower case, as the headers' are.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
