package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/nodetaint"
)

// The startup-taint part exports what its remover last found of the
// admission policy: 0 until a check finds it not in force, then 1.
func TestTaintPartExportsUnfenced(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: nodetaint.DefaultKey, Effect: corev1.TaintEffectNoSchedule}}}}
	c := fake.NewClientset(node)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var probes atomic.Int32
	// Every dry run admitted, as with the policy's binding deleted.
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if len(a.(k8stesting.PatchActionImpl).GetPatchOptions().DryRun) == 0 {
			return false, nil, nil
		}
		if probes.Add(1) == 2 {
			cancel()
		}
		return true, nil, nil
	})
	p := &taintPart{remover: &nodetaint.Remover{Client: c, Node: "n1", Key: nodetaint.DefaultKey,
		Ready: func() (bool, string) { return true, "" }, Poll: time.Millisecond, MaxBackoff: time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	m := metrics.New()
	p.metrics(m)
	if got := scrapeLine(t, m, "sluice_startup_taint_unfenced"); got != "sluice_startup_taint_unfenced 0" {
		t.Errorf("before a check: %q", got)
	}
	p.remover.Run(ctx)
	if got := scrapeLine(t, m, "sluice_startup_taint_unfenced"); got != "sluice_startup_taint_unfenced 1" {
		t.Errorf("after an admitted dry run: %q", got)
	}
}

// scrapeLine returns the sample line of name from m's /metrics.
func scrapeLine(t *testing.T, m *metrics.Metrics, name string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	return ""
}
