package lifecycletest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// agentNot waits for node's agent to be Ready in a container other than
// notID and returns its ID.
func (m *Mesh) agentNot(t *testing.T, node, notID string, timeout time.Duration) string {
	t.Helper()
	var id string
	nodetest.Eventually(t, timeout, m.CNI+"'s agent Ready on "+node, func() error {
		var err error
		if id, err = m.Agent(t, node); err != nil {
			return err
		}
		if id == notID {
			return fmt.Errorf("container %s not yet replaced", id)
		}
		return nil
	})
	return id
}

// waitBack waits until every pod runs again with a new app container,
// noting when each did, or that it was evicted or is gone; a pod not back
// by timeout has failed for good.
func (m *Mesh) waitBack(t *testing.T, pods []*rebootPod, since time.Time, timeout time.Duration) {
	t.Helper()
	cs := m.Client(t)
	for deadline := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		left := 0
		for _, p := range pods {
			if p.back != 0 || p.failed != "" {
				continue
			}
			got, err := cs.CoreV1().Pods(p.ns).Get(t.Context(), p.name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				p.failed = "deleted under the test"
			case err != nil:
				left++
			case Evicted(got):
				p.evicted, p.failed = true, got.Status.Message
			case AllRunning(got) && AppID(got) != p.appID:
				p.back = time.Since(since)
			case time.Now().After(deadline):
				p.failed = fmt.Sprintf("not running again after %v: %s", timeout, nodetest.PodState(got))
			default:
				left++
			}
		}
		if left == 0 {
			return
		}
	}
}

// watchIPs hands the prober every address the pods have had, polling the
// API server until ctx ends: after a reboot a pod may come back on
// another.
func (m *Mesh) watchIPs(ctx context.Context, pr *prober, pods []*rebootPod) {
	cs, err := m.Cluster.Client()
	if err != nil {
		return
	}
	for ; ctx.Err() == nil; time.Sleep(200 * time.Millisecond) {
		for _, p := range pods {
			got, err := cs.CoreV1().Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
			if err == nil && got.Status.PodIP != "" {
				pr.watch(got.Status.PodIP)
			}
		}
	}
}

// waitCaptured waits until the prober has been answered captured at each
// running pod's current address: by the stand-in proxy for a sidecar pod,
// by ztunnel in the pod's name for an ambient one.
func (m *Mesh) waitCaptured(t *testing.T, pr *prober, pods []*rebootPod, timeout time.Duration) {
	t.Helper()
	nodetest.Eventually(t, timeout, "the prober answered captured by every pod", func() error {
		for _, p := range pods {
			if p.failed != "" {
				continue
			}
			got, err := m.Client(t).CoreV1().Pods(p.ns).Get(t.Context(), p.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			want := "proxy captured on :15006"
			if p.kind == KindAmbient {
				want = "ztunnel " + p.uid + " captured on :15006"
			}
			if line := pr.captured(got.Status.PodIP); !strings.HasPrefix(line, want) {
				return fmt.Errorf("%s/%s at %s: last captured reply %q, want %q", p.ns, p.name, got.Status.PodIP, line, want)
			}
		}
		return nil
	})
}
