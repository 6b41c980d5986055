//go:build !noapiserver

// The real kube-apiserver tier: compiled out by -tags noapiserver, which
// the non-root unit run uses (it ran as root in the same `make test`).

package nodetaint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// manifests is the chart rendered with its defaults: the ServiceAccount,
// ClusterRole, binding and startup-taint policy the tests install are the
// ones that ship.
const manifests = "../../deploy/manifests/sluice.yaml"

// The agent here is a real ServiceAccount token bound to a pod on its
// node, as the kubelet mounts it; the token user is only there because an
// Env needs one.
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

// shipped is what the tests installed from the manifests: the
// ServiceAccount and the startup-taint policy's binding.
type shipped struct {
	sa      *corev1.ServiceAccount
	binding *admissionv1.ValidatingAdmissionPolicyBinding
}

// install creates the shipped ServiceAccount, ClusterRole, its binding,
// the ValidatingAdmissionPolicies and their bindings, once.
func install(t *testing.T, admin kubernetes.Interface) shipped {
	t.Helper()
	installOnce.Do(func() { installed, installErr = kubetest.InstallShipped(admin, manifests) })
	if installErr != nil {
		t.Fatal(installErr)
	}
	b := installed.Binding("-startup-taint")
	if b == nil {
		t.Fatalf("%s has no startup-taint policy binding", manifests)
	}
	return shipped{sa: installed.SA, binding: b}
}

// agentNode creates a Node with the startup taint and another (the API
// server adds its own node.kubernetes.io/not-ready), and a pod
// of the shipped ServiceAccount on it, and returns a client with that
// pod's bound token: the agent's identity, its node name in the token.
func agentNode(t *testing.T, e *kubetest.Env, admin kubernetes.Interface, sa *corev1.ServiceAccount) (string, kubernetes.Interface) {
	t.Helper()
	name := fmt.Sprintf("node-%d", nodeSeq.Add(1))
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{other, startup}}}
	if _, err := admin.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name, e.AgentOn(t, admin, sa, name)
}

// lastAnswer prints the error a poll saw last, when the poll gives up.
type lastAnswer func() error

func (f lastAnswer) String() string { return fmt.Sprint(f()) }

// waitProbe waits until the API server's answer to a dry run of the
// probe by the agent is admitted (want true) or refused by a
// ValidatingAdmissionPolicy: the policy machinery reads bindings from an
// informer, so a change takes effect a moment after the write.
func waitProbe(t *testing.T, agent kubernetes.Interface, node string, admitted bool) {
	t.Helper()
	patch := []byte(`{"metadata":{"labels":{"` + ProbeLabel + `":"wait"}}}`)
	var err error
	nstest.Eventually(t, 30*time.Second, func() bool {
		_, err = agent.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch,
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return admitted && err == nil || !admitted && err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
	}, "a dry-run label by the agent, want admitted=%v; the last answer: %v", admitted, lastAnswer(func() error { return err }))
}

// logBuffer collects the Remover's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func realRemover(agent kubernetes.Interface, node string, logs io.Writer) *Remover {
	return &Remover{Client: agent, Node: node, Key: DefaultKey, Ready: func() (bool, string) { return true, "" },
		Poll: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(logs, nil))}
}

func nodeOf(t *testing.T, admin kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// With the shipped policy and binding in force, the agent's own token
// takes the startup taint off its own node, and only that.
func TestFenceHoldsTaintRemoved(t *testing.T) {
	e := shared.Get(t)
	admin := kubernetes.NewForConfigOrDie(e.AdminConfig())
	s := install(t, admin)
	node, agent := agentNode(t, e, admin, s.sa)
	waitProbe(t, agent, node, false)
	before := nodeOf(t, admin, node)

	var logs logBuffer
	r := realRemover(agent, node, &logs)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r.Run(ctx)
	n := nodeOf(t, admin, node)
	if !reflect.DeepEqual(n.Spec.Taints, Without(before.Spec.Taints, DefaultKey)) {
		t.Errorf("taints after Run = %v, want %v less the startup taint\n%s", n.Spec.Taints, before.Spec.Taints, logs.String())
	}
	if r.Unfenced() {
		t.Error("Unfenced() with the policy in force")
	}
	if _, ok := n.Labels[ProbeLabel]; ok {
		t.Errorf("the dry run left its label on the node: %v", n.Labels)
	}
}

// With the policy's binding deleted the agent's token could change any
// node: the agent keeps its taint, says so in its log, its metric and a
// Node Event, keeps checking, changes nothing, and removes the taint once
// the binding is back.
func TestFenceAbsentTaintKept(t *testing.T) {
	e := shared.Get(t)
	admin := kubernetes.NewForConfigOrDie(e.AdminConfig())
	s := install(t, admin)
	node, agent := agentNode(t, e, admin, s.sa)
	bindings := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if err := bindings.Delete(t.Context(), s.binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		b := s.binding.DeepCopy()
		b.ResourceVersion = ""
		if _, err := bindings.Create(context.Background(), b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("restore the binding: %v", err)
		}
	}
	t.Cleanup(restore)
	waitProbe(t, agent, node, true)
	before := nodeOf(t, admin, node)

	var logs logBuffer
	r := realRemover(agent, node, &logs)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()

	const kept = "kept the node's startup taint: its admission policy is not in force"
	// Three checks, each admitted: the taint stays and the agent keeps
	// checking on its schedule.
	nstest.Eventually(t, 30*time.Second, func() bool { return logs.count(kept) >= 3 }, "three fence checks logged")
	if !r.Unfenced() {
		t.Error("Unfenced() = false with the binding deleted")
	}
	after := nodeOf(t, admin, node)
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the node changed while the fence was absent: %v → %v (labels %v, taints %v)",
			before.ResourceVersion, after.ResourceVersion, after.Labels, after.Spec.Taints)
	}
	if !slices.ContainsFunc(after.Spec.Taints, func(t corev1.Taint) bool { return t.Key == DefaultKey }) {
		t.Errorf("taints = %v, want the startup taint kept", after.Spec.Taints)
	}
	evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var found int
	for _, ev := range evs.Items {
		if ev.Reason == ReasonStartupTaintKept && ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.UID == before.UID {
			found++
		}
	}
	if found != 1 {
		t.Errorf("%d %s Events on node %s, want 1 (once per finding): %v", found, ReasonStartupTaintKept, node, evs.Items)
	}

	// The binding back: the next check finds the fence and the taint goes.
	restore()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("Run did not end after the binding was restored\n%s", logs.String())
	}
	if n := nodeOf(t, admin, node); !reflect.DeepEqual(n.Spec.Taints, Without(before.Spec.Taints, DefaultKey)) {
		t.Errorf("taints after the binding came back = %v, want %v less the startup taint", n.Spec.Taints, before.Spec.Taints)
	}
	if r.Unfenced() {
		t.Error("Unfenced() still true once the fence was found again")
	}
}

// An agent whose --node-name is another node's never takes that node's
// taint, fence or no fence: the policy refuses its probe there for the
// wrong node, which is not the fence's answer, so it only retries.
func TestOtherNodesTaintNeverRemoved(t *testing.T) {
	e := shared.Get(t)
	admin := kubernetes.NewForConfigOrDie(e.AdminConfig())
	s := install(t, admin)
	own, agent := agentNode(t, e, admin, s.sa)
	victim, _ := agentNode(t, e, admin, s.sa)
	waitProbe(t, agent, own, false)
	before := nodeOf(t, admin, victim)

	var logs logBuffer
	r := realRemover(agent, victim, &logs)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	nstest.Eventually(t, 30*time.Second, func() bool { return logs.count("remove the node's startup taint") >= 3 }, "three refused tries logged")
	cancel()
	<-done
	if n := nodeOf(t, admin, victim); n.ResourceVersion != before.ResourceVersion {
		t.Errorf("the other node changed: taints %v, labels %v", n.Spec.Taints, n.Labels)
	}
	if r.Unfenced() {
		t.Error("a refusal for the wrong node read as no fence")
	}
	if !strings.Contains(logs.String(), "only the node its service-account token is bound to") {
		t.Errorf("the log does not give the policy's refusal:\n%s", logs.String())
	}
}
