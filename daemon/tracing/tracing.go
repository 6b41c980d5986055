// Package tracing builds the agent's tracer provider from OpenTelemetry's
// standard environment, so an operator turns tracing on as for any other
// OTel-instrumented process: OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set and OTEL_SDK_DISABLED not true
// exports over OTLP; anything else is a no-op provider, whose spans cost a
// context value and nothing else.
//
// What the SDK and the exporters read from the environment themselves
// (the endpoint's URL and its insecure scheme, headers, timeout,
// OTEL_TRACES_SAMPLER and _ARG, OTEL_BSP_*, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_SERVICE_NAME) is left to them; this package decides only what
// they do not: whether to export at all, the protocol, and the default
// service name.
package tracing

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceName is the agent's service.name unless OTEL_SERVICE_NAME (or
// service.name in OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const ServiceName = "sluice-agent"

// The OTLP protocols the agent exports with. The OTLP exporter
// specification makes http/protobuf the default, and so does the agent.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// FlushTimeout bounds the flush of spans still queued when the agent
// stops: a collector that is away must not hold up the agent's exit.
const FlushTimeout = 5 * time.Second

// Provider is the agent's tracer provider: the SDK's exporting over OTLP,
// or a no-op one.
type Provider struct {
	sdk      *sdktrace.TracerProvider // nil: tracing is off
	protocol string
}

// Enabled reports whether the environment asks for traces to be exported.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// Protocol is the OTLP protocol the environment names for traces: the
// traces-specific variable first, then the general one, then the
// specification's default. Another value (http/json, which the Go
// exporters do not speak) is an error.
func Protocol(getenv func(string) string) (string, error) {
	p := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if p == "" {
		p = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "", ProtocolHTTPProtobuf:
		return ProtocolHTTPProtobuf, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	}
	return "", fmt.Errorf("OTLP protocol %q is not supported: use %s or %s", p, ProtocolGRPC, ProtocolHTTPProtobuf)
}

// New builds the provider the environment asks for; attrs describe this
// agent (its version, its node) beside the service name.
func New(ctx context.Context, getenv func(string) string, attrs ...attribute.KeyValue) (*Provider, error) {
	if !Enabled(getenv) {
		return &Provider{}, nil
	}
	protocol, err := Protocol(getenv)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if protocol == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP %s trace exporter: %w", protocol, err)
	}
	// Later sources win: the environment's service name over the default.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(append([]attribute.KeyValue{attribute.String("service.name", ServiceName)}, attrs...)...),
		resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	// No sampler option: the SDK reads OTEL_TRACES_SAMPLER itself, and
	// without it samples as the caller's traceparent says (parentbased_always_on).
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{sdk: tp, protocol: protocol}, nil
}

// TracerProvider is what the agent installs as OpenTelemetry's global.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p.sdk == nil {
		return noop.NewTracerProvider()
	}
	return p.sdk
}

// Exporting says how spans leave the agent: "" when tracing is off.
func (p *Provider) Exporting() string { return p.protocol }

// Shutdown flushes the spans still queued, within FlushTimeout, and stops
// the exporter.
func (p *Provider) Shutdown() error {
	if p.sdk == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), FlushTimeout)
	defer cancel()
	return p.sdk.Shutdown(ctx)
}
