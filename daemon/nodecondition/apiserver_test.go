//go:build !noapiserver

// The real kube-apiserver tier: compiled out by -tags noapiserver, which
// the non-root unit run uses (it ran as root in the same `make test`).

package nodecondition

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/daemon/health"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// manifests is the chart rendered with its defaults: the ServiceAccount,
// ClusterRole and admission policies the tests install are the ones that
// ship, and shippedType the condition type the chart passes.
const (
	manifests   = "../../deploy/manifests/sluice.yaml"
	shippedType = "sluice.dev/MeshReady"
)

// The agent is a real ServiceAccount token bound to a pod on its node; the
// token user is only there because an Env needs one.
var shared = &kubetest.Shared{User: "unused"}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Stop()
	os.Exit(code)
}

var (
	installOnce sync.Once
	installed   kubetest.Shipped
	installErr  error
	nodeSeq     atomic.Int64
)

func install(t *testing.T, admin kubernetes.Interface) kubetest.Shipped {
	t.Helper()
	installOnce.Do(func() { installed, installErr = kubetest.InstallShipped(admin, manifests) })
	if installErr != nil {
		t.Fatal(installErr)
	}
	if !strings.Contains(readFile(t, manifests), "--node-condition="+shippedType) {
		t.Fatalf("%s does not pass --node-condition=%s", manifests, shippedType)
	}
	return installed
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// newNode creates a node as a kubelet leaves it: Ready True in its status,
// and the startup taint (whose own policy must not stand in the way).
func newNode(t *testing.T, admin kubernetes.Interface) string {
	t.Helper()
	name := fmt.Sprintf("node-%d", nodeSeq.Add(1))
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "cni.istio.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}}}
	n, err := admin.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Unix(1000, 0), LastTransitionTime: metav1.Unix(1000, 0)}}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func condition(t *testing.T, admin kubernetes.Interface, node string, typ corev1.NodeConditionType) *corev1.NodeCondition {
	t.Helper()
	n, err := admin.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func publisher(agent kubernetes.Interface, node string, want func() State, wake func() <-chan struct{}) *Publisher {
	return &Publisher{Client: agent, Node: node, Type: shippedType, Want: want, Wake: wake, Refresh: time.Minute,
		Retry: 200 * time.Millisecond, MaxBackoff: 30 * time.Second, Timeout: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func statusPatch(t *testing.T, agent kubernetes.Interface, node, patch string) error {
	t.Helper()
	_, err := agent.CoreV1().Nodes().Patch(t.Context(), node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	return err
}

// With the RBAC and admission policy the chart ships, the agent's own token
// keeps its condition on its own node (startup taint and all), and is
// refused every other change of a node's status: another condition (the
// kubelet's Ready), another node, a label, the capacity.
func TestPolicyFencesTheCondition(t *testing.T) {
	e := shared.Get(t)
	admin := kubernetes.NewForConfigOrDie(e.AdminConfig())
	s := install(t, admin)
	own, victim := newNode(t, admin), newNode(t, admin)
	agent := e.AgentOn(t, admin, s.SA, own)

	// The policy machinery reads bindings from an informer: wait until a
	// dry run (nothing written) of a change to the kubelet's condition is
	// refused, then every other answer is final.
	var err error
	var try int
	nstest.Eventually(t, 30*time.Second, func() bool {
		try++
		ready := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Try%d"}]}}`, try)
		_, err = agent.CoreV1().Nodes().Patch(t.Context(), own, types.StrategicMergePatchType, []byte(ready),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
	}, "the agent's write of the Ready condition refused by the policy; the last answer: %v", lastAnswer(func() error { return err }))
	if !strings.Contains(err.Error(), "may change no node condition but "+shippedType) {
		t.Errorf("the Ready write was refused for another reason: %v", err)
	}

	p := publisher(agent, own, func() State { return State{OK: true, Reason: ReasonReady, Message: "ready"} }, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := p.patch(ctx, shown{}, State{OK: true, Reason: ReasonReady, Message: "ready"}); err != nil {
		t.Fatalf("the agent's own condition on its own node: %v", err)
	}
	if c := condition(t, admin, own, shippedType); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("condition after the patch: %+v", c)
	}
	if err := p.Stopping(ctx, "SIGTERM"); err != nil {
		t.Fatalf("AgentStopping on its own node: %v", err)
	}
	if c := condition(t, admin, own, shippedType); c == nil || c.Status != corev1.ConditionFalse || c.Reason != ReasonStopping {
		t.Errorf("condition after Stopping: %+v", c)
	}
	if c := condition(t, admin, own, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "KubeletReady" {
		t.Errorf("the kubelet's Ready condition changed: %+v", c)
	}

	for _, tc := range []struct{ name, node, patch, refusal string }{
		{"its condition on another node", victim, `{"status":{"conditions":[{"type":"` + shippedType + `","status":"False","reason":"X"}]}}`,
			"only the status of the node its service-account token is bound to"},
		{"another condition", own, `{"status":{"conditions":[{"type":"example.com/Other","status":"True","reason":"X"}]}}`,
			"may change no node condition but " + shippedType},
		{"a label through the status", own, `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`,
			"may change nothing of a node but its node condition"},
		{"the capacity", own, `{"status":{"capacity":{"cpu":"1000"}}}`, "may change nothing of a node but its node condition"},
	} {
		before, err := admin.CoreV1().Nodes().Get(t.Context(), tc.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = statusPatch(t, agent, tc.node, tc.patch)
		if err == nil || !strings.Contains(err.Error(), tc.refusal) {
			t.Errorf("%s: %v, want refused: %s", tc.name, err, tc.refusal)
		}
		if after, _ := admin.CoreV1().Nodes().Get(t.Context(), tc.node, metav1.GetOptions{}); after.ResourceVersion != before.ResourceVersion {
			t.Errorf("%s: the node changed", tc.name)
		}
	}
}

// lastAnswer prints the error a poll saw last, when the poll gives up.
type lastAnswer func() error

func (f lastAnswer) String() string { return fmt.Sprint(f()) }

// transitions watches node and reports when each status of the condition
// was first seen, as the API server delivered it. It returns once the
// watch is open, from the node's own resource version: a watch "from now"
// waits for the watch cache to reach the newest write of any kind, which
// no node write may bring for a while.
func transitions(t *testing.T, admin kubernetes.Interface, node string) func(corev1.ConditionStatus, time.Time) (time.Time, bool) {
	t.Helper()
	type seen struct {
		status corev1.ConditionStatus
		at     time.Time
	}
	var mu sync.Mutex
	var log []seen
	n, err := admin.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := admin.CoreV1().Nodes().Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=" + node,
		ResourceVersion: n.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { w.Stop(); <-done })
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Error {
				if t.Context().Err() == nil { // the test's end cuts the watch too
					t.Errorf("the watch of node %s ended: %+v", node, ev.Object)
				}
				return
			}
			for _, c := range n.Status.Conditions {
				if c.Type == shippedType {
					mu.Lock()
					if len(log) == 0 || log[len(log)-1].status != c.Status {
						log = append(log, seen{c.Status, time.Now()})
					}
					mu.Unlock()
				}
			}
		}
	}()
	// The first time status was seen at or after since.
	return func(status corev1.ConditionStatus, since time.Time) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range log {
			if s.status == status && !s.at.Before(since) {
				return s.at, true
			}
		}
		return time.Time{}, false
	}
}

// The condition follows the truth within a second: with the agent's real
// health checks on their production period (1 s while ready), the node
// shows False within 1 s of the check first failing, and True again within
// 1 s of its first pass, through the shipped RBAC and policy.
func TestConditionFollowsWithinASecond(t *testing.T) {
	e := shared.Get(t)
	admin := kubernetes.NewForConfigOrDie(e.AdminConfig())
	s := install(t, admin)
	node := newNode(t, admin)
	agent := e.AgentOn(t, admin, s.SA, node)
	seen := transitions(t, admin, node)

	// The entry: in place or not; the check records when it first answered
	// each way since the last flip.
	var entry atomic.Bool
	var mu sync.Mutex
	var firstAnswer time.Time
	flip := func(v bool) {
		mu.Lock()
		defer mu.Unlock()
		entry.Store(v)
		firstAnswer = time.Time{}
	}
	answered := func() time.Time { mu.Lock(); defer mu.Unlock(); return firstAnswer }
	checks := &health.Checks{}
	checks.Add("installer", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		if firstAnswer.IsZero() {
			firstAnswer = time.Now()
		}
		return entry.Load(), "conflist entry missing"
	})
	flip(true)
	began := time.Now()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go checks.Run(ctx, time.Second)
	want := func() State {
		if ok, why := checks.Ready(); !ok {
			return State{Reason: "PluginNotInstalled", Message: why}
		}
		return State{OK: true, Reason: ReasonReady, Message: "ready"}
	}
	go publisher(agent, node, want, checks.Published).Run(ctx)
	nstest.Eventually(t, 30*time.Second, func() bool { _, ok := seen(corev1.ConditionTrue, began); return ok }, "the condition True")
	for _, step := range []struct {
		entry  bool
		status corev1.ConditionStatus
	}{{false, corev1.ConditionFalse}, {true, corev1.ConditionTrue}, {false, corev1.ConditionFalse}, {true, corev1.ConditionTrue}} {
		flip(step.entry)
		nstest.Eventually(t, 10*time.Second, func() bool { return !answered().IsZero() }, "the check ran")
		at := answered()
		var shown time.Time
		nstest.Eventually(t, 10*time.Second, func() bool { var ok bool; shown, ok = seen(step.status, at); return ok },
			"the condition %s", step.status)
		lag := shown.Sub(at)
		t.Logf("entry %v: the node showed %s %v after the check answered", step.entry, step.status, lag.Round(time.Millisecond))
		if lag > time.Second {
			t.Errorf("entry %v: the node showed %s %v after the check answered, want within 1 s", step.entry, step.status, lag)
		}
	}
}

// waitFence waits until a dry-run label through the agent's status is
// admitted (want false) or refused by the policy (want true): the policy
// machinery reads bindings from an informer.
func waitFence(t *testing.T, agent kubernetes.Interface, node string, inForce bool) {
	t.Helper()
	p := &Publisher{Client: agent, Node: node}
	var err error
	nstest.Eventually(t, 30*time.Second, func() bool {
		err = p.checkFence(t.Context())
		return inForce && err == nil || !inForce && errors.Is(err, errUnfenced)
	}, "the fence in force = %v; the last answer: %v", inForce, lastAnswer(func() error { return err }))
}

// With the policy's binding deleted the agent's nodes/status grant reaches
// every node's status: the publisher writes nothing, not even
// AgentStopping, and writes once the binding is back.
func TestFenceAbsentConditionNotWritten(t *testing.T) {
	e := shared.Get(t)
	admin := kubernetes.NewForConfigOrDie(e.AdminConfig())
	s := install(t, admin)
	node := newNode(t, admin)
	agent := e.AgentOn(t, admin, s.SA, node)
	binding := s.Binding("-node-condition")
	if binding == nil {
		t.Fatalf("%s has no node-condition policy binding", manifests)
	}
	bindings := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if err := bindings.Delete(t.Context(), binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		b := binding.DeepCopy()
		b.ResourceVersion = ""
		if _, err := bindings.Create(context.Background(), b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("restore the binding: %v", err)
		}
		waitFence(t, agent, node, true)
	}
	t.Cleanup(restore)
	waitFence(t, agent, node, false)

	p := publisher(agent, node, nil, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	before, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.patch(ctx, shown{}, State{OK: true, Reason: ReasonReady}); !errors.Is(err, errUnfenced) {
		t.Errorf("a write with the fence absent: %v, want %v", err, errUnfenced)
	}
	if err := p.Stopping(ctx, "SIGTERM"); !errors.Is(err, errUnfenced) {
		t.Errorf("AgentStopping with the fence absent: %v, want %v", err, errUnfenced)
	}
	if after, _ := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the node changed with the fence absent: %+v", after.Status.Conditions)
	}

	restore()
	if _, err := p.patch(ctx, shown{}, State{OK: true, Reason: ReasonReady, Message: "ready"}); err != nil {
		t.Fatalf("a write with the fence back: %v", err)
	}
	if c := condition(t, admin, node, shippedType); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("condition with the fence back: %+v", c)
	}
}
