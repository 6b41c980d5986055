package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// ns is where the fake-clientset tests record: the fake keeps no
// namespaces, and each test has a clientset of its own.
const ns = "shop"

func newRecorder(t *testing.T, c kubernetes.Interface) *Recorder {
	t.Helper()
	r := New(Config{Client: c, NodeName: node, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	t.Cleanup(func() { r.Shutdown(context.Background()) })
	return r
}

// shutdown flushes r; the Events are in the API server when it returns.
func shutdown(t *testing.T, r *Recorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.Shutdown(ctx)
}

func listEvents(t *testing.T, c kubernetes.Interface, ns string) []corev1.Event {
	t.Helper()
	l, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events in %s: %v", ns, err)
	}
	return l.Items
}

func TestRecorderCreatesEventsOnPods(t *testing.T) {
	admin := fake.NewClientset()
	r := newRecorder(t, admin)
	pod := PodRef{Namespace: ns, Name: "cart", UID: "0000-cart"}
	r.CaptureFailed(pod, Sandbox{}, errors.New("apply ruleset: netlink said no"))
	r.RulesetReasserted(pod, []string{"rule out-redirect missing"})
	r.NetnsReplaced(PodRef{Namespace: ns, Name: "moved", UID: "0000-moved"}, "/var/run/netns/cni-1", "/proc/42/ns/net")
	r.Pod(ns, "other", "0000-other", corev1.EventTypeNormal, ReasonCaptureRepaired, "programmed late")
	shutdown(t, r)

	got := map[string]corev1.Event{}
	for _, ev := range listEvents(t, admin, ns) {
		got[ev.Reason] = ev
	}
	for reason, want := range map[string]struct{ typ, pod, uid, msg string }{
		ReasonCaptureFailed:     {corev1.EventTypeWarning, "cart", "0000-cart", "netlink said no"},
		ReasonRulesetReasserted: {corev1.EventTypeNormal, "cart", "0000-cart", "out-redirect missing"},
		ReasonCaptureRepaired:   {corev1.EventTypeNormal, "other", "0000-other", "programmed late"},
		ReasonNetnsReplaced:     {corev1.EventTypeWarning, "moved", "0000-moved", "mounted at the pod's netns path /var/run/netns/cni-1; sluice wrote nothing to it"},
	} {
		ev, ok := got[reason]
		switch {
		case !ok:
			t.Errorf("no %s event; have %v", reason, got)
		case ev.Type != want.typ || ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Name != want.pod ||
			string(ev.InvolvedObject.UID) != want.uid || !strings.Contains(ev.Message, want.msg):
			t.Errorf("%s event: %s on %s %s (uid %s): %q; want %s on pod %s (uid %s) saying %q",
				reason, ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.InvolvedObject.UID, ev.Message,
				want.typ, want.pod, want.uid, want.msg)
		case ev.Source.Host != node || ev.Source.Component != component || ev.Count != 1:
			t.Errorf("%s event: source %+v count %d; want host %s, component %s, count 1", reason, ev.Source, ev.Count, node, component)
		}
	}
}

func TestRecorderCountsRepeats(t *testing.T) {
	c := fake.NewClientset()
	testCountsRepeats(t, c, c, ns)
}

// testCountsRepeats records a repeated cause and another as agentClient,
// and reads them back in ns as admin: one Event per message, counted.
func testCountsRepeats(t *testing.T, agentClient, admin kubernetes.Interface, ns string) {
	t.Helper()
	r := newRecorder(t, agentClient)
	pod := PodRef{Namespace: ns, Name: "flaky", UID: "0000-flaky"}
	for range 3 {
		r.CaptureFailed(pod, Sandbox{}, errors.New("same cause"))
	}
	r.CaptureFailed(pod, Sandbox{}, errors.New("another cause"))
	shutdown(t, r)

	counts := map[string]int32{}
	for _, ev := range listEvents(t, admin, ns) {
		counts[ev.Message] += ev.Count
		if ev.LastTimestamp.Before(&ev.FirstTimestamp) {
			t.Errorf("repeated event %s: last seen %v before first %v", ev.Name, ev.LastTimestamp, ev.FirstTimestamp)
		}
	}
	if len(counts) != 2 {
		t.Fatalf("events by message %v: want one Event per distinct message", counts)
	}
	for msg, n := range counts {
		want := int32(1)
		if strings.Contains(msg, "same cause") {
			want = 3
		}
		if n != want {
			t.Errorf("event %q has count %d, want %d", msg, n, want)
		}
	}
	if r.Failed() != 0 {
		t.Errorf("Failed = %d, want 0", r.Failed())
	}
}

// A pod failing ADD for one cause gets one Event counting up, though each
// kubelet retry is a new sandbox whose id and netns the error names.
func TestCaptureFailedAggregatesAcrossSandboxes(t *testing.T) {
	admin := fake.NewClientset()
	r := newRecorder(t, admin)
	pod := PodRef{Namespace: ns, Name: "ambient", UID: "0000-ambient"}
	for _, id := range []string{"3f9a0c1d2e4b", "77c1e0b2a9d4", "a0b1c2d3e4f5"} {
		netns := "/var/run/netns/cni-" + id
		r.CaptureFailed(pod, Sandbox{ID: id, Netns: netns},
			fmt.Errorf("enroll %s/eth0 in %s: hand %s/eth0 to ztunnel: no ztunnel connected", id, netns, id))
	}
	shutdown(t, r)
	evs := listEvents(t, admin, ns)
	if len(evs) != 1 || evs[0].Count != 3 {
		for _, ev := range evs {
			t.Logf("event x%d: %s", ev.Count, ev.Message)
		}
		t.Fatalf("%d Events for one cause over 3 sandboxes, want 1 with count 3", len(evs))
	}
	if strings.Contains(evs[0].Message, "3f9a0c1d2e4b") || !strings.Contains(evs[0].Message, "no ztunnel connected") {
		t.Fatalf("message %q: want the cause without the sandbox id", evs[0].Message)
	}
}

func TestRecorderShutdownFlushesThenDrops(t *testing.T) {
	admin := fake.NewClientset()
	r := newRecorder(t, admin)
	const n = 40
	for i := range n {
		r.Pod(ns, fmt.Sprintf("p%d", i), "", corev1.EventTypeNormal, ReasonCaptureRepaired, "flush me")
	}
	shutdown(t, r)
	if got := len(listEvents(t, admin, ns)); got != n {
		t.Errorf("%d events after Shutdown, want all %d queued before it", got, n)
	}
	r.Pod(ns, "late", "", corev1.EventTypeNormal, ReasonCaptureRepaired, "after shutdown")
	if r.Dropped() != 1 {
		t.Errorf("Dropped = %d after an event past Shutdown, want 1", r.Dropped())
	}
}

// An unreachable API server costs one failed call per Event, counted and
// logged, and never blocks the caller.
func TestRecorderAPIServerAway(t *testing.T) {
	c := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"})
	r := newRecorder(t, c)
	r.Pod("ns", "p", "u", corev1.EventTypeWarning, ReasonCaptureFailed, "nobody hears this")
	shutdown(t, r)
	if r.Failed() != 1 {
		t.Errorf("Failed = %d, want 1", r.Failed())
	}
}

// Standalone agents have no recorder; every method is a no-op on nil.
func TestNilRecorder(t *testing.T) {
	var r *Recorder
	r.Pod("ns", "p", "u", corev1.EventTypeNormal, "Reason", "msg")
	r.CaptureFailed(PodRef{Namespace: "ns", Name: "p"}, Sandbox{}, errors.New("x"))
	r.RulesetReasserted(PodRef{Namespace: "ns", Name: "p"}, nil)
	r.Shutdown(context.Background())
	if r.Dropped() != 0 || r.Failed() != 0 {
		t.Error("a nil recorder counted something")
	}
}

func TestTruncateKeepsRunes(t *testing.T) {
	s := strings.Repeat("é", 600) // 1200 bytes
	got := truncate(s, maxMessage)
	if len(got) > maxMessage || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") {
		t.Errorf("truncate: %d bytes, valid UTF-8 %v, marked %v", len(got), utf8.ValidString(got), strings.HasSuffix(got, "..."))
	}
	if truncate("short", maxMessage) != "short" {
		t.Error("truncate changed a short message")
	}
}
