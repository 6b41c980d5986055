package repair

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// These check what each mode decides, on client-go's fake clientset (no
// API server, any user); podcheck's tests hold the same modes against the
// real API server and the shipped ClusterRole.

func newRepairer(t *testing.T, mode string, client *fake.Clientset) *Repairer {
	t.Helper()
	store, err := workloads.Open(workloads.Config{Dir: t.TempDir(), Opener: redirecttest.NewNamespaces(t), Kernel: redirecttest.NewFake(),
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Store: store, Client: client, HostProc: "/proc", Mode: mode, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func uncaptured() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "u-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.5"}}
}

// label patches pods/status with the pod's uid (a pod recreated under the
// name is never marked), and a pod that carries the label needs nothing.
func TestLabelPatchesStatusWithUID(t *testing.T) {
	pod := uncaptured()
	client := fake.NewClientset(pod)
	r := newRepairer(t, ModeLabel, client)
	if r.Done(pod) {
		t.Fatal("Done before the label is set")
	}
	out, err := r.Act(context.Background(), pod, policy.Decision{Capture: true})
	if err != nil || out != OutcomeLabelled {
		t.Fatalf("Act = %q, %v; want %q", out, err, OutcomeLabelled)
	}
	var patch k8stesting.PatchAction
	for _, a := range client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patch = p
		}
	}
	if patch == nil || patch.GetSubresource() != "status" || !strings.Contains(string(patch.GetPatch()), `"uid":"u-1"`) {
		t.Fatalf("patch %v: want one on pods/status carrying the uid", patch)
	}
	got, err := client.CoreV1().Pods("ns").Get(context.Background(), "app", metav1.GetOptions{})
	if err != nil || !r.Done(got) {
		t.Errorf("labels %v (%v): want %s, and Done", got.Labels, err, DefaultLabel)
	}
}

// delete: a pod already gone counts as evicted; a budget that allows no
// disruption (429) is a failure to retry, not an eviction; an eviction
// marks the pod done, so no later update evicts again.
func TestEvictOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		want     string
		wantDone bool
	}{
		{"evicted", nil, OutcomeEvicted, true},
		{"gone", apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "app"), OutcomeEvicted, false},
		{"budget", apierrors.NewTooManyRequests("disruption budget", 10), "", false},
		{"refused", apierrors.NewForbidden(schema.GroupResource{Resource: "pods/eviction"}, "app", errors.New("no")), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := uncaptured()
			client := fake.NewClientset(pod)
			evictions := 0
			client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				evictions++
				return true, nil, tc.err
			})
			r := newRepairer(t, ModeDelete, client)
			out, err := r.Act(context.Background(), pod, policy.Decision{Capture: true})
			if out != tc.want || (err == nil) != (tc.want != "") {
				t.Fatalf("Act = %q, %v; want %q", out, err, tc.want)
			}
			if evictions != 1 {
				t.Errorf("%d evictions asked, want 1", evictions)
			}
			if r.Done(pod) != tc.wantDone {
				t.Errorf("Done = %v, want %v", r.Done(pod), tc.wantDone)
			}
		})
	}
}

// off only reports, once: the pod is done after the first report.
func TestOffReportsOnce(t *testing.T) {
	pod := uncaptured()
	client := fake.NewClientset(pod)
	r := newRepairer(t, ModeOff, client)
	if out, err := r.Act(context.Background(), pod, policy.Decision{Capture: true}); err != nil || out != OutcomeReported {
		t.Fatalf("Act = %q, %v", out, err)
	}
	if !r.Done(pod) {
		t.Error("not done after the report")
	}
	if n := len(client.Actions()); n != 0 {
		t.Errorf("off mode called the API %d times: %v", n, client.Actions())
	}
	r.Forget(pod)
	if r.Done(pod) {
		t.Error("still done after Forget (the pod was deleted)")
	}
}

func TestNewRefusesUnknownMode(t *testing.T) {
	if _, err := New(Config{Mode: "fix"}); err == nil {
		t.Error("New accepted --repair-mode fix")
	}
}
