package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicemesh/sluice/test/harness/otlptest"
)

// tracingResult is the standalone ADD with the agent's tracing off and on
// (exporting every span over OTLP/gRPC to a receiver in this process),
// interleaved so both meet the same machine; each ADD carries a runtime's
// traceparent, so the plugin's check runs in both.
type tracingResult struct {
	off, on         series
	cpuOff, cpuOn   time.Duration // the agent's CPU time over its ADDs
	spans, requests int           // what the receiver got from the "on" agent
}

func benchTracing(nd *nsDir, tmp, stateRoot string, b bins, pods int, cl *cleanups) (*tracingResult, error) {
	res := &tracingResult{off: series{name: "sluice ADD, tracing off"}, on: series{name: "sluice ADD, tracing on (OTLP/gRPC, every span)"}}
	off, err := newNode(nd, filepath.Join(tmp, "node-trace-off"), b)
	if err != nil {
		return nil, err
	}
	on, err := newNode(nd, filepath.Join(tmp, "node-trace-on"), b)
	if err != nil {
		return nil, err
	}
	lis, err := listenIn(on.nodeNS)
	if err != nil {
		return nil, err
	}
	rcv, err := otlptest.Serve(lis, otlptest.GRPC)
	if err != nil {
		return nil, err
	}
	cl.add(rcv.Close)
	// The SDK's defaults otherwise: the batch goes every 5 s.
	on.env = []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + rcv.Addr(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_TRACES_SAMPLER=always_on"}
	for _, n := range []*node{off, on} {
		n.stateDir = filepath.Join(stateRoot, filepath.Base(n.dir))
		cl.add(n.stopAgent)
		if _, err := n.startAgent(); err != nil {
			return nil, err
		}
	}
	nsOff, err := off.pods("troff", pods)
	if err != nil {
		return nil, err
	}
	nsOn, err := on.pods("tron", pods)
	if err != nil {
		return nil, err
	}
	// Warm both agents (first-call costs) before measuring.
	for _, n := range []*node{off, on} {
		w, err := n.pods("warm-"+filepath.Base(n.dir), 1)
		if err != nil {
			return nil, err
		}
		if _, err := n.tracedAdd(0, "warm-"+filepath.Base(n.dir), w[0]); err != nil {
			return nil, err
		}
	}
	cpuOff0, err := readCPU(off.agent.Process.Pid)
	if err != nil {
		return nil, err
	}
	cpuOn0, err := readCPU(on.agent.Process.Pid)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		for _, r := range []struct {
			n  *node
			s  *series
			ns string
		}{{off, &res.off, nsOff[i]}, {on, &res.on, nsOn[i]}} {
			d, err := r.n.tracedAdd(i, fmt.Sprintf("tr-%s-%d", filepath.Base(r.n.dir), i), r.ns)
			if err != nil {
				return nil, err
			}
			r.s.add(d)
		}
	}
	cpuOff1, err := readCPU(off.agent.Process.Pid)
	if err != nil {
		return nil, err
	}
	cpuOn1, err := readCPU(on.agent.Process.Pid)
	if err != nil {
		return nil, err
	}
	res.cpuOff, res.cpuOn = cpuOff1.sub(cpuOff0).process, cpuOn1.sub(cpuOn0).process
	// Stopping flushes what is queued: every span reaches the receiver.
	off.stopAgent()
	on.stopAgent()
	res.spans, res.requests = len(rcv.Spans()), rcv.Requests()
	return res, nil
}

// tracedAdd is add with a runtime's sampled span in ctx: libcni passes it
// to the plugin as TRACEPARENT.
func (n *node) tracedAdd(i int, id, nsPath string) (time.Duration, error) {
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], fmt.Sprintf("bench%011d", i))
	copy(sid[:], "runtime1")
	ctx := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	start := time.Now()
	_, err := n.lib.AddNetwork(ctx, n.sluice, rc(id, nsPath))
	return time.Since(start), err
}

// runTracingOnly measures the ADD with tracing off and on and writes only
// that section, to paste into docs/benchmarks.md.
func runTracingOnly(c config, tmp string, nd *nsDir, res *results, cl *cleanups) (*results, error) {
	shm, err := os.MkdirTemp("/dev/shm", "sluice-bench-state-")
	if err != nil {
		return nil, err
	}
	cl.add(func() { os.RemoveAll(shm) })
	binDir := filepath.Join(tmp, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	b, err := buildAll(binDir)
	if err != nil {
		return nil, err
	}
	tr, err := benchTracing(nd, tmp, shm, b, c.e2ePods, cl)
	if err != nil {
		return nil, err
	}
	res.took = time.Since(res.started)
	m := &md{}
	m.p("<!-- go run ./hack/bench -tracing-only, %s, took %s -->", res.started.UTC().Format("2006-01-02 15:04 MST"), res.took.Round(time.Second))
	writeTracing(m, tr)
	if res.out = c.out; res.out == "" {
		res.out = "/dev/stdout"
	}
	return res, os.WriteFile(res.out, []byte(m.b.String()), 0o644)
}

func writeTracing(m *md, tr *tracingResult) {
	m.table("2c. ADD with the agent's tracing off and on (standalone, interleaved)", tr.off, tr.on)
	n := len(tr.on.d)
	ratio := float64(tr.on.p50()) / float64(max(tr.off.p50(), 1))
	m.p("Tracing on / off, ADD p50: %.2f× (%s vs %s); p99 %s vs %s. The agent's CPU per ADD: %.2f ms off, %.2f ms on "+
		"(/proc, 10 ms ticks, over %d ADDs each). The receiver got %d spans in %d export requests for %d traced ADDs.",
		ratio, ms(tr.on.p50()), ms(tr.off.p50()), ms(tr.on.p99()), ms(tr.off.p99()),
		perADD(tr.cpuOff, n), perADD(tr.cpuOn, n), n, tr.spans, tr.requests, n+1)
	m.p("")
	m.p("Every ADD carries a sampled runtime traceparent (libcni passes it as `TRACEPARENT`), so the plugin's")
	m.p("check and forwarding run in both rows; the \"on\" agent samples every call (`always_on`) and batches")
	m.p("on the SDK's default 5 s schedule; 4 spans an ADD (the call, the policy decision, the enrolment, the")
	m.p("nftables apply).")
	m.p("")
}
