// Package otlptest is an OTLP trace receiver in the test's own process:
// the collector's TraceService/Export over gRPC, or POST /v1/traces with a
// protobuf body over HTTP, as an OpenTelemetry Collector serves them. It
// keeps every span it is sent, flattened for assertions.
package otlptest

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// The protocols, as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	GRPC         = "grpc"
	HTTPProtobuf = "http/protobuf"
)

// Span is one received span, its ids in lowercase hex.
type Span struct {
	TraceID, SpanID, ParentSpanID string
	Name                          string
	Kind                          tracepb.Span_SpanKind
	Attrs                         map[string]string
	Failed                        bool   // status code ERROR
	Message                       string // the status's message
	Resource                      map[string]string
}

// Receiver serves one protocol on one listener.
type Receiver struct {
	mu       sync.Mutex
	spans    []Span
	requests int
	addr     string
	closeFn  func()
}

// Serve starts receiving on lis with protocol (GRPC or HTTPProtobuf).
func Serve(lis net.Listener, protocol string) (*Receiver, error) {
	r := &Receiver{addr: lis.Addr().String()}
	switch protocol {
	case GRPC:
		gs := grpc.NewServer()
		collectortrace.RegisterTraceServiceServer(gs, &traceService{r: r})
		go gs.Serve(lis)
		r.closeFn = gs.Stop
	case HTTPProtobuf:
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/traces", r.serveHTTP)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go hs.Serve(lis)
		r.closeFn = func() { hs.Close() }
	default:
		lis.Close()
		return nil, errors.New("otlptest: unknown protocol " + protocol)
	}
	return r, nil
}

// Addr is the listener's address, host:port.
func (r *Receiver) Addr() string { return r.addr }

// Close stops serving.
func (r *Receiver) Close() { r.closeFn() }

// Spans are the spans received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests counts the export requests received, empty ones included.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// WaitFor polls until cond holds of the spans received or timeout passes,
// and returns the spans it last saw.
func (r *Receiver) WaitFor(timeout time.Duration, cond func([]Span) bool) ([]Span, bool) {
	deadline := time.Now().Add(timeout)
	for {
		spans := r.Spans()
		if cond(spans) {
			return spans, true
		}
		if time.Now().After(deadline) {
			return spans, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type traceService struct {
	collectortrace.UnimplementedTraceServiceServer
	r *Receiver
}

func (s *traceService) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// serveHTTP is OTLP/HTTP's binary protobuf encoding: the request and the
// answer are the gRPC service's messages.
func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content-type "+ct+" is not application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *Receiver) add(req *collectortrace.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				got = append(got, Span{
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					ParentSpanID: hex.EncodeToString(sp.GetParentSpanId()), Name: sp.GetName(), Kind: sp.GetKind(),
					Attrs:  attrMap(sp.GetAttributes()),
					Failed: sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, Message: sp.GetStatus().GetMessage(),
					Resource: res,
				})
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	r.spans = append(r.spans, got...)
}

// attrMap flattens attributes to strings (ints and bools as Go prints
// them): assertions compare names and values, not types.
func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.GetStringValue()
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = itoa(v.GetIntValue())
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = map[bool]string{true: "true", false: "false"}[v.GetBoolValue()]
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }
