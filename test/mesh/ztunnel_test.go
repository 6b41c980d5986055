package mesh

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// requireZtunnel skips the test when the real ztunnel was never built on
// this machine: the only skip for a missing artefact in this package.
func requireZtunnel(t *testing.T) *corev1.Pod {
	t.Helper()
	if noZtunnel != nil {
		t.Skipf("%v: build it once with `make ztunnel ZTUNNEL_SRC=<a checkout of istio/ztunnel>`", noZtunnel)
	}
	return readyPod(t, istioNS, "app=ztunnel", cluster.NodeName, 2*time.Minute)
}

// ztunnelCount sums ztunnel's metric name over the samples whose labels
// include every one of match, read from its stats port.
func ztunnelCount(zt *corev1.Pod, name string, match map[string]string) (float64, error) {
	body, err := get("http://" + zt.Status.PodIP + ":15020/metrics")
	if err != nil {
		return 0, fmt.Errorf("ztunnel's metrics: %w", err)
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		labels, value, ok := sample(line, name)
		if !ok || !hasLabels(labels, match) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("ztunnel's metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// sample splits a text-format sample of metric name into its label text
// and value.
func sample(line, name string) (labels, value string, ok bool) {
	rest, ok := strings.CutPrefix(line, name+"{")
	if !ok {
		return "", "", false
	}
	labels, value, ok = strings.Cut(rest, "} ")
	return labels, strings.Fields(value + " ")[0], ok
}

func hasLabels(labels string, match map[string]string) bool {
	for k, v := range match {
		if !strings.Contains(","+labels, ","+k+"="+strconv.Quote(v)) {
			return false
		}
	}
	return true
}

// opened are the connections ztunnel opened as the destination's proxy
// from workload src (empty: any) to workload dst in ns, under security
// policy ("mutual_tls", or "unknown" for plain text, whose source ztunnel
// cannot name).
func opened(zt *corev1.Pod, ns, src, dst, policy string) (float64, error) {
	match := map[string]string{
		"reporter":                       "destination",
		"destination_workload":           dst,
		"destination_workload_namespace": ns,
		"connection_security_policy":     policy,
	}
	if src != "" {
		match["source_workload"] = src
	}
	return ztunnelCount(zt, "istio_tcp_connections_opened_total", match)
}

// agentMetric is the value of one of the agent's unlabelled metrics, read
// from its health port on the node.
func agentMetric(name string) (float64, error) {
	body, err := get("http://" + cluster.NodeIP + ":9890/metrics")
	if err != nil {
		return 0, fmt.Errorf("the agent's metrics: %w", err)
	}
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("the agent's metrics have no %s", name)
}
