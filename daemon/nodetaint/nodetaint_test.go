package nodetaint

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
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
)

var (
	startup = corev1.Taint{Key: DefaultKey, Effect: corev1.TaintEffectNoSchedule}
	other   = corev1.Taint{Key: "example.com/other", Value: "x", Effect: corev1.TaintEffectNoSchedule}
)

func node(taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: taints}}
}

func remover(c *fake.Clientset, ready func() (bool, string)) *Remover {
	return &Remover{Client: c, Node: "n1", Key: DefaultKey, Ready: ready, Poll: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// policyDenial is the error the API server returns when the chart's
// startup-taint policy refuses a request (its dispatcher's wording).
func policyDenial(msg string) error {
	err := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1",
		errors.New("ValidatingAdmissionPolicy 'sluice-agent-startup-taint' with binding 'sluice-agent-startup-taint' denied request: "+msg))
	err.ErrStatus.Reason, err.ErrStatus.Code = metav1.StatusReasonInvalid, 422
	return err
}

// probes answers every dry-run patch of c (the fence check) with
// answer(n), n counting from 1, without applying it; nil is "admitted".
// The fake clientset would apply a dry run.
func probes(c *fake.Clientset, answer func(n int32) error) *atomic.Int32 {
	var n atomic.Int32
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p := a.(k8stesting.PatchActionImpl); len(p.GetPatchOptions().DryRun) == 0 {
			return false, nil, nil
		}
		return true, nil, answer(n.Add(1))
	})
	return &n
}

// fenced answers the fence check as the chart's policy in force does.
func fenced(c *fake.Clientset) { probes(c, func(int32) error { return policyDenial(FenceDenial) }) }

// applied is the patches that were not dry runs.
func applied(c *fake.Clientset) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range c.Actions() {
		if p, ok := a.(k8stesting.PatchActionImpl); ok && a.GetResource().Resource == "nodes" && len(p.GetPatchOptions().DryRun) == 0 {
			out = append(out, a)
		}
	}
	return out
}

// nodeEvents is the Events created on node n1.
func nodeEvents(c *fake.Clientset) []*corev1.Event {
	var out []*corev1.Event
	for _, a := range c.Actions() {
		if cr, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "events" {
			if ev := cr.GetObject().(*corev1.Event); ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == "n1" {
				out = append(out, ev)
			}
		}
	}
	return out
}

func taints(t *testing.T, c *fake.Clientset) []corev1.Taint {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Taints
}

// The taint stays while the agent is not ready and goes, alone, once it is.
func TestRemovesOnlyTheStartupTaintOnceReady(t *testing.T) {
	c := fake.NewClientset(node(other, startup))
	fenced(c)
	var ready atomic.Bool
	var asked atomic.Int32
	r := remover(c, func() (bool, string) {
		if asked.Add(1) == 3 {
			// Still tainted after readiness said no twice.
			if got := taints(t, c); len(got) != 2 {
				t.Errorf("taints while not ready = %v", got)
			}
			ready.Store(true)
		}
		return ready.Load(), "not yet"
	})
	r.Run(context.Background())
	if got := taints(t, c); !reflect.DeepEqual(got, []corev1.Taint{other}) {
		t.Errorf("taints after Run = %v, want only %v", got, other)
	}
}

// A failed patch (the list changed under it, or RBAC refused) is retried.
func TestRetriesAFailedRemoval(t *testing.T) {
	c := fake.NewClientset(node(startup))
	var fails atomic.Int32
	c.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fails.Add(1) <= 2 {
			return true, nil, errors.New("the server rejected our request")
		}
		return false, nil, nil
	})
	fenced(c)
	remover(c, func() (bool, string) { return true, "" }).Run(context.Background())
	if got := taints(t, c); len(got) != 0 {
		t.Errorf("taints after Run = %v, want none", got)
	}
	if n := fails.Load(); n != 3 {
		t.Errorf("%d patches, want 2 failed and 1 applied", n)
	}
}

// A node without the taint is not patched at all.
func TestUntaintedNodeIsNotPatched(t *testing.T) {
	c := fake.NewClientset(node(other))
	fenced(c)
	remover(c, func() (bool, string) { return true, "" }).Run(context.Background())
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" {
			t.Errorf("patched a node without the taint: %v", a)
		}
	}
}

// Run ends with its context while the agent never gets ready.
func TestStopsWithItsContext(t *testing.T) {
	c := fake.NewClientset(node(startup))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	remover(c, func() (bool, string) { return false, "never" }).Run(ctx)
	if got := taints(t, c); len(got) != 1 {
		t.Errorf("taints = %v, want the startup taint kept", got)
	}
}

// A dry run of a change the policy forbids, admitted: the policy or its
// binding is not in force. The taint stays, the agent keeps checking,
// reports it once in an Event, and patches nothing for real.
func TestUnfencedKeepsTheTaint(t *testing.T) {
	c := fake.NewClientset(node(other, startup))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := remover(c, func() (bool, string) { return true, "" })
	n := probes(c, func(n int32) error {
		if n == 3 {
			if !r.Unfenced() {
				t.Error("Unfenced() = false after an admitted probe")
			}
			cancel()
		}
		return nil
	})
	r.Run(ctx)
	if n.Load() != 3 {
		t.Errorf("%d fence checks, want 3 (it keeps checking)", n.Load())
	}
	if got := taints(t, c); len(got) != 2 {
		t.Errorf("taints = %v, want both kept", got)
	}
	if a := applied(c); len(a) != 0 {
		t.Errorf("patched the node without a fence: %v", a)
	}
	if !r.Unfenced() {
		t.Error("Unfenced() = false")
	}
	if evs := nodeEvents(c); len(evs) != 1 || evs[0].Reason != ReasonStartupTaintKept || evs[0].Type != corev1.EventTypeWarning ||
		evs[0].Namespace != metav1.NamespaceDefault {
		t.Errorf("node Events = %v, want one Warning %s in default", evs, ReasonStartupTaintKept)
	}
}

// The fence found again after it was missing: the taint goes, and the
// metric says the fence is there.
func TestFenceFoundAgainRemovesTheTaint(t *testing.T) {
	c := fake.NewClientset(node(other, startup))
	n := probes(c, func(n int32) error {
		if n <= 2 {
			return nil
		}
		return policyDenial(FenceDenial)
	})
	r := remover(c, func() (bool, string) { return true, "" })
	r.Run(context.Background())
	if got := taints(t, c); !reflect.DeepEqual(got, []corev1.Taint{other}) {
		t.Errorf("taints after Run = %v, want only %v", got, other)
	}
	if n.Load() != 3 || r.Unfenced() {
		t.Errorf("%d checks, Unfenced() = %v; want 3, false", n.Load(), r.Unfenced())
	}
	if evs := nodeEvents(c); len(evs) != 1 {
		t.Errorf("%d node Events, want 1 for the one finding", len(evs))
	}
}

// Only the chart's policy refusing the probe is the fence: an RBAC
// refusal, the same policy refusing for another reason (the token bound to
// another node), another policy's or a webhook's refusal, or no answer
// leave the taint, and are not reported as a missing fence either.
func TestOnlyThePolicysDenialIsTheFence(t *testing.T) {
	for name, err := range map[string]error{
		"rbac": apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1",
			errors.New(`User "system:serviceaccount:kube-system:sluice-agent" cannot patch resource "nodes"`)),
		"wrong node":     policyDenial("sluice-agent may change only the node its service-account token is bound to"),
		"another policy": policyDenial("nodes' labels are managed by the platform"),
		"webhook": apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1",
			errors.New(`admission webhook "labels.example.com" denied the request: `+FenceDenial)),
		"timeout": apierrors.NewTimeoutError("request did not complete", 1),
	} {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientset(node(startup))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := probes(c, func(n int32) error {
				if n == 3 {
					cancel()
				}
				return err
			})
			r := remover(c, func() (bool, string) { return true, "" })
			r.Run(ctx)
			if n.Load() != 3 {
				t.Errorf("%d checks, want 3", n.Load())
			}
			if got := taints(t, c); len(got) != 1 {
				t.Errorf("taints = %v, want the startup taint kept", got)
			}
			if a := applied(c); len(a) != 0 {
				t.Errorf("patched the node: %v", a)
			}
			if r.Unfenced() || len(nodeEvents(c)) != 0 {
				t.Errorf("Unfenced() = %v, %d Events: an unknown answer reported as no fence", r.Unfenced(), len(nodeEvents(c)))
			}
		})
	}
}

// The probe is a dry run of the removal plus a label the node does not
// carry (a no-op label would pass the policy and read as no fence).
func TestProbeIsTheRemovalPlusANewLabel(t *testing.T) {
	n := node(other, startup)
	n.Labels = map[string]string{ProbeLabel: "dry-run"}
	c := fake.NewClientset(n)
	fenced(c)
	remover(c, func() (bool, string) { return true, "" }).Run(context.Background())
	var probe *k8stesting.PatchActionImpl
	for _, a := range c.Actions() {
		if p, ok := a.(k8stesting.PatchActionImpl); ok && len(p.GetPatchOptions().DryRun) != 0 {
			probe = &p
		}
	}
	if probe == nil {
		t.Fatal("no dry-run patch")
	}
	if got := probe.GetPatchOptions().DryRun; !reflect.DeepEqual(got, []string{metav1.DryRunAll}) {
		t.Errorf("DryRun = %v", got)
	}
	want := `{"metadata":{"labels":{"` + ProbeLabel + `":"dry-run-again"}},` +
		`"spec":{"taints":[{"key":"example.com/other","value":"x","effect":"NoSchedule"}]}}`
	if string(probe.GetPatch()) != want {
		t.Errorf("probe = %s, want %s", probe.GetPatch(), want)
	}
}
