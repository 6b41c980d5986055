package mesh

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// line is one log line and when the runtime wrote it.
type line struct {
	at   time.Time
	text string
}

// timedLogs is a container's log with each line's time, as
// `kubectl logs --timestamps` reads it.
func timedLogs(t testing.TB, ns, pod, container string) []line {
	t.Helper()
	b, err := client(t).CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Timestamps: true}).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("logs of %s/%s: %v", ns, pod, err)
	}
	var out []line
	for _, l := range strings.Split(string(b), "\n") {
		ts, text, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		out = append(out, line{at, text})
	}
	return out
}

// dialResults are the pod's dial results ("app" for a reply) in [from, to).
func dialResults(t testing.TB, ns, pod string, from, to time.Time) []string {
	t.Helper()
	var out []string
	for _, l := range timedLogs(t, ns, pod, "app") {
		if _, res, ok := strings.Cut(l.text, ": "); ok && strings.HasPrefix(l.text, "app dial ") && within(l.at, from, to) {
			out = append(out, res)
		}
	}
	return out
}

// servedIn counts the connections the pod's app served from ip in [from, to).
func servedIn(t testing.TB, ns, pod, ip string, from, to time.Time) int {
	t.Helper()
	n := 0
	for _, l := range timedLogs(t, ns, pod, "app") {
		if strings.HasPrefix(l.text, "app served "+ip+":") && within(l.at, from, to) {
			n++
		}
	}
	return n
}

func within(at, from, to time.Time) bool {
	return !at.Before(from) && at.Before(to)
}

// refused is a dial result of a connection nothing accepted.
func refused(result string) bool {
	return strings.Contains(result, "connection refused")
}
