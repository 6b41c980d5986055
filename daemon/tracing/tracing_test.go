package tracing

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicemesh/sluice/test/harness/otlptest"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"}, true},
		{map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, false},
	} {
		if got := Enabled(envOf(tc.env)); got != tc.want {
			t.Errorf("Enabled(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
}

func TestProtocol(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		want    string
		wantErr bool
	}{
		{nil, ProtocolHTTPProtobuf, false}, // the OTLP exporter specification's default
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ProtocolGRPC, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, ProtocolHTTPProtobuf, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "", true},
	} {
		got, err := Protocol(envOf(tc.env))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("Protocol(%v) = %q, %v; want %q, error %v", tc.env, got, err, tc.want, tc.wantErr)
		}
	}
	if _, err := New(context.Background(), envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})); err == nil || !strings.Contains(err.Error(), "http/json") {
		t.Fatalf("New with http/json: %v", err)
	}
}

// Off, the provider is a no-op: its spans do not record.
func TestOffRecordsNothing(t *testing.T) {
	p, err := New(context.Background(), envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.TracerProvider().Tracer("t").Start(context.Background(), "s")
	if span.IsRecording() || p.Exporting() != "" {
		t.Fatalf("a disabled provider records (exporting %q)", p.Exporting())
	}
	if err := p.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

// On, a span reaches a receiver over either protocol at Shutdown's flush,
// named sluice-agent unless OTEL_SERVICE_NAME says otherwise.
func TestExportsAtShutdown(t *testing.T) {
	for _, tc := range []struct{ protocol, service, wantService string }{
		{otlptest.GRPC, "", ServiceName},
		{otlptest.HTTPProtobuf, "", ServiceName},
		{otlptest.HTTPProtobuf, "agent-on-node-a", "agent-on-node-a"},
	} {
		t.Run(tc.protocol+tc.service, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			rcv, err := otlptest.Serve(lis, tc.protocol)
			if err != nil {
				t.Fatal(err)
			}
			defer rcv.Close()
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + lis.Addr().String(),
				"OTEL_EXPORTER_OTLP_PROTOCOL": tc.protocol, "OTEL_SERVICE_NAME": tc.service,
				// Only the flush at Shutdown may send it.
				"OTEL_BSP_SCHEDULE_DELAY": "600000"}
			for k, v := range env {
				t.Setenv(k, v) // the exporters and the SDK read the process's env
			}
			p, err := New(context.Background(), envOf(env), attribute.String("k8s.node.name", "node-a"))
			if err != nil {
				t.Fatal(err)
			}
			if p.Exporting() != tc.protocol {
				t.Fatalf("exporting %q, want %q", p.Exporting(), tc.protocol)
			}
			_, span := p.TracerProvider().Tracer("t").Start(context.Background(), "one")
			span.End()
			if n := len(rcv.Spans()); n != 0 {
				t.Fatalf("%d spans before the flush", n)
			}
			if err := p.Shutdown(); err != nil {
				t.Fatal(err)
			}
			spans := rcv.Spans()
			if len(spans) != 1 || spans[0].Name != "one" {
				t.Fatalf("received %+v, want the one span", spans)
			}
			if r := spans[0].Resource; r["service.name"] != tc.wantService || r["k8s.node.name"] != "node-a" {
				t.Fatalf("resource %v", r)
			}
		})
	}
}

// A collector that is away holds the agent's exit up by FlushTimeout at most.
func TestShutdownIsBounded(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Accepts and never answers.
	defer lis.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "60000")
	p, err := New(context.Background(), envOf(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + lis.Addr().String()}))
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.TracerProvider().Tracer("t").Start(context.Background(), "one")
	span.End()
	start := time.Now()
	_ = p.Shutdown()
	if took := time.Since(start); took > FlushTimeout+2*time.Second {
		t.Fatalf("shutdown took %s, more than the flush bound %s", took, FlushTimeout)
	}
}

// The sampler is the SDK's, from OTEL_TRACES_SAMPLER: always_off records
// nothing even with an endpoint.
func TestSamplerFromEnv(t *testing.T) {
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_SAMPLER": "always_off"}
	for k, v := range env {
		t.Setenv(k, v)
	}
	p, err := New(context.Background(), envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	if _, span := p.TracerProvider().Tracer("t").Start(context.Background(), "s"); span.IsRecording() {
		t.Fatal("always_off sampled a span")
	}
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	on, err := New(context.Background(), envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	defer on.Shutdown()
	if _, span := on.TracerProvider().Tracer("t").Start(context.Background(), "s"); !span.IsRecording() {
		t.Fatal("always_on did not sample")
	}
}
