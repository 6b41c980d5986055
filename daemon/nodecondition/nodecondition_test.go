package nodecondition

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

const condType corev1.NodeConditionType = "sluice.dev/MeshReady"

// kubeletReady is the kubelet's own condition, which the publisher must
// never touch.
var kubeletReady = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
	LastHeartbeatTime: metav1.Unix(1000, 0), LastTransitionTime: metav1.Unix(1000, 0)}

// verdicts stands in for the health checks: set changes the state and
// publishes a verdict, as Checks.Run does.
type verdicts struct {
	mu    sync.Mutex
	state State
	next  chan struct{}
	reads atomic.Int64
}

func newVerdicts(s State) *verdicts { return &verdicts{state: s, next: make(chan struct{})} }

func (v *verdicts) want() State {
	v.reads.Add(1)
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state
}

func (v *verdicts) wake() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.next
}

func (v *verdicts) set(s State) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.state = s
	close(v.next)
	v.next = make(chan struct{})
}

func newPublisher(c *fake.Clientset, v *verdicts) *Publisher {
	return &Publisher{Client: c, Node: "node-a", Type: condType, Want: v.want, Wake: v.wake, Refresh: time.Hour,
		Retry: 20 * time.Millisecond, MaxBackoff: 80 * time.Millisecond, Timeout: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// fencedClient is a fake clientset whose API server refuses the fence's
// dry run as the chart's admission policy does.
func fencedClient(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if len(a.(k8stesting.PatchActionImpl).GetPatchOptions().DryRun) == 0 {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "node-a",
			errors.New("ValidatingAdmissionPolicy 'sluice-agent-node-condition' with binding 'sluice-agent-node-condition' denied request: "+FenceDenial))
	})
	return c
}

func nodeWith(conds ...corev1.NodeCondition) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{Conditions: conds}}
}

func run(t *testing.T, p *Publisher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func conditions(t *testing.T, c *fake.Clientset) (ours, ready *corev1.NodeCondition) {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		switch n.Status.Conditions[i].Type {
		case condType:
			ours = &n.Status.Conditions[i]
		case corev1.NodeReady:
			ready = &n.Status.Conditions[i]
		}
	}
	return ours, ready
}

// patches counts the writes, not the fence's dry runs.
func patches(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" && len(a.(k8stesting.PatchActionImpl).GetPatchOptions().DryRun) == 0 {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, c *fake.Clientset, status corev1.ConditionStatus, reason string) *corev1.NodeCondition {
	t.Helper()
	var got *corev1.NodeCondition
	nstest.Eventually(t, 5*time.Second, func() bool {
		got, _ = conditions(t, c)
		return got != nil && got.Status == status && got.Reason == reason
	}, "condition %s=%s (%s)", condType, status, reason)
	return got
}

// The condition follows each change of the verdict, on the status
// subresource, with the reason and message; lastTransitionTime moves only
// with the status (a previous agent's False at t=2000 stays the
// transition while the status stays False); the kubelet's Ready condition
// is never touched.
func TestFollowsTheVerdict(t *testing.T) {
	prev := corev1.NodeCondition{Type: condType, Status: corev1.ConditionFalse, Reason: ReasonStopping,
		LastHeartbeatTime: metav1.Unix(2000, 0), LastTransitionTime: metav1.Unix(2000, 0)}
	c := fencedClient(nodeWith(kubeletReady, prev))
	v := newVerdicts(State{Reason: "PluginNotInstalled", Message: "installer: conflist entry missing"})
	run(t, newPublisher(c, v))

	first := waitFor(t, c, corev1.ConditionFalse, "PluginNotInstalled")
	if first.Message != "installer: conflist entry missing" || !first.LastHeartbeatTime.After(prev.LastHeartbeatTime.Time) ||
		!first.LastTransitionTime.Equal(&prev.LastTransitionTime) {
		t.Errorf("first condition = %+v, want a new heartbeat and the transition of %v kept", first, prev.LastTransitionTime)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" && a.GetSubresource() != "status" {
			t.Errorf("patched subresource %q, want status", a.GetSubresource())
		}
	}
	v.set(State{Reason: "AgentNotServing", Message: "grpc: socket refused"})
	if second := waitFor(t, c, corev1.ConditionFalse, "AgentNotServing"); !second.LastTransitionTime.Equal(&prev.LastTransitionTime) {
		t.Errorf("lastTransitionTime moved to %v without a status change", second.LastTransitionTime)
	}
	v.set(State{OK: true, Reason: ReasonReady, Message: "sluice-agent is ready"})
	third := waitFor(t, c, corev1.ConditionTrue, ReasonReady)
	if !third.LastTransitionTime.After(prev.LastTransitionTime.Time) || !third.LastTransitionTime.Equal(&third.LastHeartbeatTime) {
		t.Errorf("True at %v (heartbeat %v), want the transition now", third.LastTransitionTime, third.LastHeartbeatTime)
	}
	if _, ready := conditions(t, c); ready == nil || *ready != kubeletReady {
		t.Errorf("the kubelet's Ready condition changed: %+v", ready)
	}
}

// Verdicts that change nothing patch nothing: the API server hears of a
// change, not of every second's verdict.
func TestUnchangedVerdictsPatchNothing(t *testing.T) {
	c := fencedClient(nodeWith(kubeletReady))
	ok := State{OK: true, Reason: ReasonReady, Message: "ready"}
	v := newVerdicts(ok)
	run(t, newPublisher(c, v))
	waitFor(t, c, corev1.ConditionTrue, ReasonReady)
	for range 20 {
		before := v.reads.Load()
		v.set(ok)
		nstest.Eventually(t, 5*time.Second, func() bool { return v.reads.Load() > before }, "the publisher read the verdict")
	}
	if n := patches(c); n != 1 {
		t.Errorf("%d patches for one state across 21 verdicts, want 1", n)
	}
}

// Refresh patches an unchanged condition again: its heartbeat moves, its
// transition does not, and a condition someone else changed heals.
func TestRefreshHealsAndBeats(t *testing.T) {
	c := fencedClient(nodeWith(kubeletReady))
	v := newVerdicts(State{OK: true, Reason: ReasonReady, Message: "ready"})
	p := newPublisher(c, v)
	p.Refresh = 100 * time.Millisecond
	run(t, p)
	first := waitFor(t, c, corev1.ConditionTrue, ReasonReady)
	// Someone writes it False behind the agent's back.
	n, _ := c.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == condType {
			n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = corev1.ConditionFalse, "Tampered"
		}
	}
	if _, err := c.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.NodeCondition
	nstest.Eventually(t, 5*time.Second, func() bool {
		got, _ = conditions(t, c)
		return got.Status == corev1.ConditionTrue && got.LastHeartbeatTime.After(first.LastHeartbeatTime.Time)
	}, "the refresh restored the condition with a newer heartbeat")
	if !got.LastTransitionTime.Equal(&first.LastTransitionTime) {
		t.Errorf("lastTransitionTime moved on a refresh: %v → %v", first.LastTransitionTime, got.LastTransitionTime)
	}
}

// A restarted agent finds its condition on the node: the same status
// keeps the earlier lastTransitionTime.
func TestRestartKeepsTransitionTime(t *testing.T) {
	old := corev1.NodeCondition{Type: condType, Status: corev1.ConditionTrue, Reason: ReasonReady,
		LastHeartbeatTime: metav1.Unix(2000, 0), LastTransitionTime: metav1.Unix(2000, 0)}
	c := fencedClient(nodeWith(kubeletReady, old))
	v := newVerdicts(State{OK: true, Reason: ReasonReady, Message: "ready"})
	run(t, newPublisher(c, v))
	var got *corev1.NodeCondition
	nstest.Eventually(t, 5*time.Second, func() bool {
		got, _ = conditions(t, c)
		return got.LastHeartbeatTime.After(old.LastHeartbeatTime.Time)
	}, "a heartbeat after the restart")
	if !got.LastTransitionTime.Equal(&old.LastTransitionTime) {
		t.Errorf("lastTransitionTime = %v, want the earlier %v kept", got.LastTransitionTime, old.LastTransitionTime)
	}
}

// A refusing API server is asked at most once per backoff, however many
// verdicts arrive; the change lands once it answers again.
func TestRetryIsBounded(t *testing.T) {
	c := fencedClient(nodeWith(kubeletReady))
	var refuse atomic.Bool
	var tries atomic.Int64
	refuse.Store(true)
	c.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		tries.Add(1)
		if refuse.Load() {
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})
	v := newVerdicts(State{OK: true, Reason: ReasonReady, Message: "ready"})
	p := newPublisher(c, v)
	run(t, p)
	// A verdict every millisecond, as a flapping check would bring.
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				v.set(State{OK: true, Reason: ReasonReady, Message: "ready"})
			}
		}
	}()
	began := time.Now()
	nstest.Eventually(t, 5*time.Second, func() bool { return tries.Load() >= 6 }, "six tries")
	elapsed := time.Since(began)
	close(stop)
	// 20, 40, 80, 80 ms...: six tries take at least 20+40+80+80+80 ms.
	if min := 300 * time.Millisecond; elapsed < min {
		t.Errorf("six tries in %v, want at least %v (the backoff)", elapsed, min)
	}
	refuse.Store(false)
	waitFor(t, c, corev1.ConditionTrue, ReasonReady)
}

// Stopping writes False with AgentStopping.
func TestStopping(t *testing.T) {
	c := fencedClient(nodeWith(kubeletReady))
	p := newPublisher(c, newVerdicts(State{OK: true}))
	if err := p.Stopping(context.Background(), "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	got, ready := conditions(t, c)
	if got == nil || got.Status != corev1.ConditionFalse || got.Reason != ReasonStopping || got.Message != "SIGTERM" {
		t.Errorf("condition after Stopping = %+v", got)
	}
	if ready == nil || *ready != kubeletReady {
		t.Errorf("the kubelet's Ready condition changed: %+v", ready)
	}
}

// Without the policy in force (the fence's dry run admitted), nothing is
// written: the publisher keeps asking on its backoff, and writes once the
// dry run is refused again.
func TestUnfencedWritesNothing(t *testing.T) {
	c := fake.NewClientset(nodeWith(kubeletReady))
	var fence atomic.Bool
	var probes atomic.Int64
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if len(a.(k8stesting.PatchActionImpl).GetPatchOptions().DryRun) == 0 {
			return false, nil, nil
		}
		probes.Add(1)
		if !fence.Load() {
			return true, nodeWith(kubeletReady), nil // admitted
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "node-a",
			errors.New("ValidatingAdmissionPolicy 'p' with binding 'p' denied request: "+FenceDenial))
	})
	v := newVerdicts(State{OK: true, Reason: ReasonReady, Message: "ready"})
	p := newPublisher(c, v)
	run(t, p)
	nstest.Eventually(t, 5*time.Second, func() bool { return probes.Load() >= 3 }, "three fence checks")
	if n := patches(c); n != 0 {
		t.Fatalf("%d writes with the fence absent", n)
	}
	if err := p.Stopping(context.Background(), "SIGTERM"); err == nil || !strings.Contains(err.Error(), "not in force") {
		t.Errorf("Stopping with the fence absent: %v, want refused for want of the fence", err)
	}
	fence.Store(true)
	waitFor(t, c, corev1.ConditionTrue, ReasonReady)
}
