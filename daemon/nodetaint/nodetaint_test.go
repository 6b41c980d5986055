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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
