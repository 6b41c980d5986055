package rpc

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/ambientmesh"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// The global provider delegates once: the package's tracers follow the
// first one set, so every test shares one recorder and picks its trace out
// by id.
var (
	recorderOnce sync.Once
	recorder     *tracetest.InMemoryExporter
)

func recordSpans() *tracetest.InMemoryExporter {
	recorderOnce.Do(func() {
		recorder = tracetest.NewInMemoryExporter()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(recorder)))
	})
	return recorder
}

// tracedCall runs method through the tracing interceptor as the plugin's
// call with traceparent tp, and returns the spans of tp's trace by name.
func tracedCall(t *testing.T, method, tp string, req any, h grpc.UnaryHandler) (map[string]tracetest.SpanStub, error) {
	t.Helper()
	rec := recordSpans()
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", tp))
	_, err := traceCalls()(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, h)
	out := map[string]tracetest.SpanStub{}
	for _, s := range rec.GetSpans() {
		if s.SpanContext.TraceID().String() == tp[3:35] {
			out[s.Name] = s
		}
	}
	return out, err
}

func attrOf(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// ambientUnit is a unit whose agent runs ambient over zt (a fakeZtunnel or
// another stand-in), every pod captured in ambient mode.
func ambientUnit(t *testing.T, zt hostZtunnel) (*unit, *fakeAnnotator) {
	u := newUnit(t, func(ns *redirecttest.Namespaces) *workloads.Ambient {
		ns.Add("/host")
		h, err := ns.Open("/host")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return &workloads.Ambient{Ztunnel: zt, Host: h}
	})
	u.cni.Policy = capture(redirect.DefaultAmbientSpec())
	ann := &fakeAnnotator{}
	u.cni.Ambient = &ambientmesh.Mesh{Store: u.store, Redirection: ann}
	return u, ann
}

// An ambient ADD is one server span, the child of the plugin's
// traceparent, naming the pod, with its steps as children; the annotation
// istiod reads is one of them.
func TestAddSpans(t *testing.T) {
	u, _ := ambientUnit(t, &fakeZtunnel{})
	u.ns.Add("/netns/c1")
	req := addReq("c1")
	req.RequestId = "feedbeef"
	const tp = "00-11111111111111111111111111111111-2222222222222222-01"
	spans, err := tracedCall(t, sluicev1.CNI_Add_FullMethodName, tp, req, func(ctx context.Context, r any) (any, error) {
		return u.cni.Add(ctx, r.(*sluicev1.AddRequest))
	})
	if err != nil {
		t.Fatal(err)
	}
	server, ok := spans["sluice.v1.CNI/Add"]
	if !ok || server.Parent.SpanID().String() != "2222222222222222" || !server.Parent.IsRemote() {
		t.Fatalf("server span %+v, want the child of the plugin's 2222222222222222", server)
	}
	for k, v := range map[string]string{"k8s.pod.name": "pod-c1", "k8s.namespace.name": "ns", "k8s.pod.uid": "uid-c1",
		"container.id": "c1", "sluice.request_id": "feedbeef", "sluice.mode": "ambient", "rpc.system": "grpc"} {
		if got := attrOf(server, k); got != v {
			t.Errorf("server span %s = %q, want %q", k, got, v)
		}
	}
	for name, parent := range map[string]string{"policy.decide": "sluice.v1.CNI/Add", "workloads.enroll": "sluice.v1.CNI/Add",
		"nftables.apply": "workloads.enroll", "redirection.annotate": "sluice.v1.CNI/Add"} {
		s, ok := spans[name]
		if !ok {
			t.Errorf("no %s span; have %v", name, keys(spans))
			continue
		}
		if s.Parent.SpanID() != spans[parent].SpanContext.SpanID() || s.Status.Code == otelcodes.Error {
			t.Errorf("%s: parent %s, want %s's; status %v", name, s.Parent.SpanID(), parent, s.Status)
		}
	}
	if v := attrOf(spans["redirection.annotate"], "sluice.redirection"); v != "enabled" {
		t.Errorf("annotation span says %q, want enabled", v)
	}
}

// A refused ADD's span carries the error, and so do the steps that failed.
func TestRefusedAddSpanFails(t *testing.T) {
	u, _ := ambientUnit(t, &fakeZtunnel{refuse: errors.New("ztunnel says no")})
	u.ns.Add("/netns/c2")
	const tp = "00-33333333333333333333333333333333-4444444444444444-01"
	spans, err := tracedCall(t, sluicev1.CNI_Add_FullMethodName, tp, addReq("c2"), func(ctx context.Context, r any) (any, error) {
		return u.cni.Add(ctx, r.(*sluicev1.AddRequest))
	})
	if err == nil {
		t.Fatal("ADD succeeded with ztunnel refusing")
	}
	server := spans["sluice.v1.CNI/Add"]
	if server.Status.Code != otelcodes.Error || attrOf(server, "rpc.grpc.status_code") == "" {
		t.Fatalf("server span status %+v, attributes %v: want an error", server.Status, server.Attributes)
	}
	if s := spans["workloads.enroll"]; s.Status.Code != otelcodes.Error || len(s.Events) == 0 {
		t.Errorf("enroll span %+v: want the error recorded", s.Status)
	}
	if v := attrOf(spans["redirection.annotate"], "sluice.redirection"); v != "pending" {
		t.Errorf("annotation span says %q, want pending", v)
	}
}

// A pod policy leaves alone is traced as a passthrough; STATUS is not traced.
func TestPassthroughAndStatusSpans(t *testing.T) {
	u := newUnit(t, nil)
	u.cni.Policy = policyFunc(func(policy.Pod) (policy.Decision, error) {
		return policy.Decision{Capture: false, Reason: "excluded"}, nil
	})
	const tp = "00-55555555555555555555555555555555-6666666666666666-01"
	spans, err := tracedCall(t, sluicev1.CNI_Add_FullMethodName, tp, addReq("c3"), func(ctx context.Context, r any) (any, error) {
		return u.cni.Add(ctx, r.(*sluicev1.AddRequest))
	})
	if err != nil {
		t.Fatal(err)
	}
	if v := attrOf(spans["sluice.v1.CNI/Add"], "sluice.mode"); v != "passthrough" {
		t.Errorf("sluice.mode %q, want passthrough", v)
	}
	if _, ok := spans["workloads.enroll"]; ok {
		t.Error("a passthrough ADD has an enroll span")
	}
	const statusTP = "00-77777777777777777777777777777777-8888888888888888-01"
	spans, _ = tracedCall(t, sluicev1.CNI_Status_FullMethodName, statusTP, &sluicev1.StatusRequest{ApiVersion: apiVersion},
		func(ctx context.Context, r any) (any, error) { return u.cni.Status(ctx, r.(*sluicev1.StatusRequest)) })
	if len(spans) != 0 {
		t.Errorf("STATUS traced: %v", keys(spans))
	}
}

func keys(m map[string]tracetest.SpanStub) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
