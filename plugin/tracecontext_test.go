package main

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const sampleParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestTraceHeaders(t *testing.T) {
	for _, tc := range []struct {
		name, tp, ts string
		want         []string // name=value of what is forwarded
	}{
		{"none", "", "", nil},
		{"parent and state", sampleParent, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7", []string{"traceparent=" + sampleParent, "tracestate=congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}},
		{"state without a parent", "", "a=1", nil},
		{"bad state dropped, parent kept", sampleParent, "A=1", []string{"traceparent=" + sampleParent}},
		{"uppercase hex", strings.ToUpper(sampleParent), "", nil},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", nil},
		{"zero parent id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "", nil},
		{"version ff", "ff" + sampleParent[2:], "", nil},
		{"version 00 with more", sampleParent + "-x", "", nil},
		{"later version with more", "01" + sampleParent[2:] + "-what-next", "", []string{"traceparent=01" + sampleParent[2:] + "-what-next"}},
		{"newline", sampleParent[:54] + "\n", "", nil},
		{"too long", "01" + sampleParent[2:] + "-" + strings.Repeat("a", 600), "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"TRACEPARENT": tc.tp, "TRACESTATE": tc.ts}
			var got []string
			for _, h := range traceHeaders(func(k string) string { return env[k] }) {
				got = append(got, h.Name+"="+h.Value)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("forwarded %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzTraceContext holds the hand-written check to OpenTelemetry's W3C
// propagator, the one the agent extracts with: what the plugin forwards the
// agent accepts, with the same ids; and what the agent would accept (within
// the length bound, header-safe) the plugin forwards.
func FuzzTraceContext(f *testing.F) {
	f.Add(sampleParent, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
	f.Add("01"+sampleParent[2:]+"-x", " a@b = 1 ,, c=2\t")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-04", "a=1,a=2")
	f.Add(strings.ToUpper(sampleParent), "0t@s=v")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		prop := propagation.TraceContext{}
		sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
		ours := validTraceparent(tp)
		if ours && !sc.IsValid() {
			t.Fatalf("forwarded %q, which the agent refuses", tp)
		}
		if ours && !strings.Contains(tp, sc.TraceID().String()+"-"+sc.SpanID().String()) {
			t.Fatalf("forwarded %q, the agent reads %s-%s", tp, sc.TraceID(), sc.SpanID())
		}
		if !ours && sc.IsValid() && len(tp) <= maxTraceHeader && printable(tp) {
			t.Fatalf("dropped %q, which the agent accepts", tp)
		}

		state, err := trace.ParseTraceState(ts)
		oursState := validTracestate(ts)
		if oursState && err != nil && !strings.Contains(err.Error(), "duplicate") {
			t.Fatalf("forwarded tracestate %q, which the agent refuses: %v", ts, err)
		}
		if !oursState && err == nil && len(ts) <= maxTraceHeader {
			t.Fatalf("dropped tracestate %q, which the agent reads as %q", ts, state.String())
		}
	})
}
