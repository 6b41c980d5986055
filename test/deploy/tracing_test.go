package deploy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/tracing"
)

// containerGetenv reads the container's literal env as the agent would.
func containerGetenv(c corev1.Container) func(string) string {
	return func(name string) string {
		if e := envOf(c, name); e != nil {
			return e.Value
		}
		return ""
	}
}

// tracing.* renders as OpenTelemetry's own env, which the agent's tracing
// package reads: off by default, on with the protocol and sampler asked.
func TestTracingValuesRenderOTELEnv(t *testing.T) {
	off := render(t, valueSet{name: "tracing-off", namespace: "kube-system"}).daemonSet(t).Spec.Template.Spec.Containers[0]
	for _, e := range off.Env {
		if strings.HasPrefix(e.Name, "OTEL_") {
			t.Errorf("default render sets %s", e.Name)
		}
	}
	if tracing.Enabled(containerGetenv(off)) {
		t.Error("the agent would trace with the chart's defaults")
	}

	on := render(t, valueSet{name: "tracing-on", namespace: "kube-system", values: `
tracing:
  endpoint: http://otel-collector.observability:4317
  protocol: grpc
  sampler: parentbased_traceidratio
  samplerArg: 0.25
`}).daemonSet(t).Spec.Template.Spec.Containers[0]
	getenv := containerGetenv(on)
	for name, want := range map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"} {
		if got := getenv(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if p, err := tracing.Protocol(getenv); !tracing.Enabled(getenv) || err != nil || p != tracing.ProtocolGRPC {
		t.Errorf("the agent would read the rendered env as enabled %v, protocol %q (%v)", tracing.Enabled(getenv), p, err)
	}
}

func TestTracingSchemaRejects(t *testing.T) {
	for _, set := range []string{"tracing.protocol=http/json", "tracing.endpoint=collector:4317", "tracing.sampler=sometimes",
		"tracing.samplerArg=2", "tracing.enpoint=http://c:4318"} {
		if out, err := command(repoRoot, nil, helmBin, append([]string{"template", "sluice", chartDir, "--set", set}, clusterFlags...)...); err == nil {
			t.Errorf("--set %s rendered:\n%s", set, out)
		}
	}
}
