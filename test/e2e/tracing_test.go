package e2e

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/sluicemesh/sluice/test/harness/otlptest"
)

// receiveIn serves an OTLP receiver on addr inside the node netns, where
// the agent runs: its loopback is the test's own.
func receiveIn(t *testing.T, n *node, addr, protocol string) *otlptest.Receiver {
	t.Helper()
	var lis net.Listener
	if err := n.NS.Do(func() (err error) { lis, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	rcv, err := otlptest.Serve(lis, protocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rcv.Close)
	return rcv
}

// runtimeSpan is the container runtime's span around a pod's ADD: libcni
// passes it to every plugin as TRACEPARENT.
func runtimeSpan(traceID, spanID string) context.Context {
	tid, _ := trace.TraceIDFromHex(traceID)
	sid, _ := trace.SpanIDFromHex(spanID)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}

// One trace per pod start: an ambient ADD driven through libcni with the
// runtime's trace context reaches the agent's OTLP exporter as a server
// span, the child of the runtime's span, naming the pod, with a step each
// for the policy decision, the enrolment, the nftables apply and
// ztunnel's ack. A refused ADD's span says it failed. Over both protocols.
func TestTraceOfPodStart(t *testing.T) {
	for _, protocol := range []string{otlptest.GRPC, otlptest.HTTPProtobuf} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			n := newNode(t)
			rcv := receiveIn(t, n, "127.0.0.1:0", protocol)
			n.agentEnv = []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + rcv.Addr(), "OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
				"OTEL_BSP_SCHEDULE_DELAY=50"}
			zsock := filepath.Join(t.TempDir(), "ztunnel", "ztunnel.sock")
			n.startAgent("--ambient", "--default-mode", "ambient", "--host-netns", n.NS.Path, "--ztunnel-socket", zsock,
				"--ztunnel-connect-wait", "0")
			c := n.cni(n.conflist("1.1.0", ""))
			pod := n.Pod("traced")
			rc := rt("traced1", pod)

			// No ztunnel yet: refused, and the span says so.
			const refusedTrace, refusedParent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
			if _, err := c.AddContext(runtimeSpan(refusedTrace, refusedParent), rc); err == nil {
				t.Fatal("ADD with no ztunnel succeeded")
			}
			spans, ok := rcv.WaitFor(10*time.Second, func(s []otlptest.Span) bool { return serverSpan(s, refusedTrace) != nil })
			if !ok {
				t.Fatalf("no server span of trace %s; received %v", refusedTrace, spans)
			}
			if s := serverSpan(spans, refusedTrace); !s.Failed || !strings.Contains(s.Message, "ztunnel") || s.ParentSpanID != refusedParent {
				t.Fatalf("refused ADD's span %+v, want failed naming ztunnel, parent %s", s, refusedParent)
			}
			if err := c.Del(rc); err != nil {
				t.Fatal(err)
			}

			z := connectZDS(t, zsock)
			z.next() // the snapshot
			const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			added := make(chan error, 1)
			go func() { _, err := c.AddContext(runtimeSpan(traceID, parentID), rc); added <- err }()
			z.next()
			if err := <-added; err != nil {
				t.Fatalf("ADD: %v", err)
			}
			want := map[string]string{"policy.decide": "server", "workloads.enroll": "server",
				"nftables.apply": "workloads.enroll", "ztunnel.add": "workloads.enroll"}
			spans, ok = rcv.WaitFor(10*time.Second, func(s []otlptest.Span) bool {
				return serverSpan(s, traceID) != nil && len(inTrace(s, traceID)) >= 1+len(want)
			})
			if !ok {
				t.Fatalf("trace %s incomplete; received %v", traceID, spans)
			}
			server := serverSpan(spans, traceID)
			if server.Name != "sluice.v1.CNI/Add" || server.ParentSpanID != parentID || server.Failed {
				t.Fatalf("server span %+v, want sluice.v1.CNI/Add, child of the runtime's %s, not failed", server, parentID)
			}
			for k, v := range map[string]string{"k8s.pod.name": "traced", "k8s.namespace.name": "default",
				"k8s.pod.uid": "uid-traced", "container.id": "traced1", "sluice.mode": "ambient"} {
				if server.Attrs[k] != v {
					t.Errorf("server span %s = %q, want %q (attributes %v)", k, server.Attrs[k], v, server.Attrs)
				}
			}
			if len(server.Attrs["sluice.request_id"]) != 16 {
				t.Errorf("server span has no plugin request id: %v", server.Attrs)
			}
			if server.Resource["service.name"] != "sluice-agent" {
				t.Errorf("resource %v, want service.name sluice-agent", server.Resource)
			}
			byName := map[string]otlptest.Span{}
			for _, s := range inTrace(spans, traceID) {
				byName[s.Name] = s
			}
			for name, parent := range want {
				s, ok := byName[name]
				if !ok {
					t.Errorf("no %s span in the trace", name)
					continue
				}
				wantParent := server.SpanID
				if parent != "server" {
					wantParent = byName[parent].SpanID
				}
				if s.ParentSpanID != wantParent || s.Failed {
					t.Errorf("%s: parent %s (want %s, the %s span), failed %v", name, s.ParentSpanID, wantParent, parent, s.Failed)
				}
			}
		})
	}
}

// Without the OTEL env the agent exports nothing: a receiver on the OTLP
// HTTP default port, where a wrongly enabled exporter would send, gets no
// request within more than the SDK's default batch interval (5 s), nor at
// the agent's exit, when the SDK flushes.
func TestNoTracingWithoutEnv(t *testing.T) {
	n := newNode(t)
	rcv := receiveIn(t, n, "127.0.0.1:4318", otlptest.HTTPProtobuf)
	a := n.startAgent()
	c := n.cni(n.conflist("1.1.0", ""))
	if _, err := c.AddContext(runtimeSpan("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"), rt("quiet1", n.Pod("quiet"))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	a.Stop(t)
	if r := rcv.Requests(); r != 0 {
		t.Fatalf("the agent without OTEL env sent %d export requests: %v", r, rcv.Spans())
	}
}

func inTrace(spans []otlptest.Span, traceID string) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

func serverSpan(spans []otlptest.Span, traceID string) *otlptest.Span {
	for _, s := range inTrace(spans, traceID) {
		if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
			return &s
		}
	}
	return nil
}
