// Package metrics defines every Prometheus metric sluice-agent exports, in
// one place, so the operator's reference (docs/operations.md) has one
// source. Served on the health address at /metrics.
package metrics

import (
	"context"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sluicemesh/sluice/internal/buildinfo"
)

const ns = "sluice"

// Metrics is the agent's registry and the instruments the code observes
// directly; values read from elsewhere at scrape time are added with Func.
type Metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
	// ApplySeconds observes one netlink ruleset transaction.
	ApplySeconds prometheus.Histogram
	expo         *exposition
}

// New registers every metric, plus Go and process collectors and build info.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg:  reg,
		expo: &exposition{g: reg, wait: maxScrapeWait},
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "cni_requests_total",
			Help: "CNI calls from the plugin, by verb and gRPC result code.",
		}, []string{"verb", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "cni_request_duration_seconds",
			Help:    "Time the agent spent on a CNI call, by verb.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"verb"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "cni_requests_in_flight",
			Help: "CNI calls being served now, by verb.",
		}, []string{"verb"}),
		ApplySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "ruleset_apply_duration_seconds",
			Help:    "Time to program one pod's ruleset (one netlink transaction).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "build_info", Help: "Always 1; the labels say which build runs.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version, "go_version": runtime.Version()},
	})
	build.Set(1)
	// Every verb's series exist from the start, at 0.
	for _, verb := range []string{"Add", "Del", "Check", "Status", "GC"} {
		m.calls.WithLabelValues(verb, "OK")
		m.latency.WithLabelValues(verb)
		m.inflight.WithLabelValues(verb)
	}
	m.reg.MustRegister(m.calls, m.latency, m.inflight, m.ApplySeconds, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Func registers a value read at scrape time: kind is "counter" or "gauge".
func (m *Metrics) Func(kind, name, help string, f func() float64) {
	opts := prometheus.Opts{Namespace: ns, Name: name, Help: help}
	if kind == "counter" {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts(opts), f))
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts), f))
}

// Register adds a custom collector (e.g. workloads by mode).
func (m *Metrics) Register(c prometheus.Collector) { m.reg.MustRegister(c) }

// Handler serves the registry in the Prometheus text format, concurrent
// scrapes from one render (exposition).
func (m *Metrics) Handler() http.Handler { return m.expo }

// Unary counts and times the sluice.v1.CNI calls.
func (m *Metrics) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	verb, ok := strings.CutPrefix(info.FullMethod, "/sluice.v1.CNI/")
	if !ok {
		return h(ctx, req)
	}
	g := m.inflight.WithLabelValues(verb)
	g.Inc()
	start := time.Now()
	resp, err := h(ctx, req)
	g.Dec()
	m.latency.WithLabelValues(verb).Observe(time.Since(start).Seconds())
	m.calls.WithLabelValues(verb, status.Code(err).String()).Inc()
	return resp, err
}

// ByLabel exports a vector computed at scrape time, e.g. enrolled
// workloads by mode: kind is "counter" or "gauge". Every one of values is
// exported, at 0 until f reports it, so a series never vanishes and an
// alert on it never goes blind; a value f reports beyond them is exported
// too.
func (m *Metrics) ByLabel(kind, name, help, label string, values []string, f func() map[string]int) {
	vt := prometheus.GaugeValue
	if kind == "counter" {
		vt = prometheus.CounterValue
	}
	m.reg.MustRegister(&byLabel{desc: prometheus.NewDesc(ns+"_"+name, help, []string{label}, nil), kind: vt, values: values, f: f})
}

type byLabel struct {
	desc   *prometheus.Desc
	kind   prometheus.ValueType
	values []string
	f      func() map[string]int
}

func (b *byLabel) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

func (b *byLabel) Collect(ch chan<- prometheus.Metric) {
	got := b.f()
	for _, v := range b.values {
		ch <- prometheus.MustNewConstMetric(b.desc, b.kind, float64(got[v]), v)
	}
	for v, n := range got {
		if !slices.Contains(b.values, v) {
			ch <- prometheus.MustNewConstMetric(b.desc, b.kind, float64(n), v)
		}
	}
}

// Bool exports 1 when f is true, else 0.
func (m *Metrics) Bool(name, help string, f func() bool) {
	m.Func("gauge", name, help, func() float64 {
		if f() {
			return 1
		}
		return 0
	})
}
