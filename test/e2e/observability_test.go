package e2e

import (
	"strings"
	"testing"
)

// Metrics move as calls happen, scraped from the real endpoint.
func TestMetricsAndProbes(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	if code, body, err := n.HTTPGet("http://127.0.0.1:9890/readyz"); err != nil || code != 200 {
		t.Fatalf("/readyz = %d %q %v", code, body, err)
	}
	if code, _, err := n.HTTPGet("http://127.0.0.1:9890/healthz"); err != nil || code != 200 {
		t.Fatalf("/healthz = %d %v", code, err)
	}
	c := n.cni(n.loopbackChain("2s"))
	pod := n.Pod("m1")
	if _, err := c.Add(rt("m1", pod)); err != nil {
		t.Fatal(err)
	}
	if err := c.Del(rt("m1", pod)); err != nil {
		t.Fatal(err)
	}
	pod2 := n.Pod("m2")
	if _, err := c.Add(rt("m2", pod2)); err != nil {
		t.Fatal(err)
	}
	_, body, err := n.HTTPGet("http://127.0.0.1:9890/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`sluice_cni_requests_total{code="OK",verb="Add"} 2`,
		`sluice_cni_requests_total{code="OK",verb="Del"} 1`,
		`sluice_cni_request_duration_seconds_count{verb="Add"} 2`,
		`sluice_ruleset_apply_duration_seconds_count 2`,
		`sluice_workloads_enrolled{mode="sidecar"} 1`,
		`sluice_ruleset_reasserts_total 0`,
		`sluice_build_info{`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}
