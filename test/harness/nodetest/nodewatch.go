package nodetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeWatch records the first moment a node stops being Ready or is
// tainted not-ready or unreachable, as the node lifecycle controller sees
// it before it evicts. The outage suites (test/node, test/peer) share it,
// so both call a node "held" by one rule.
type NodeWatch struct {
	node   string
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	first error // the first problem seen, with when
	polls int
}

// WatchNode polls the node's status every 200 ms until the test ends or
// Stop is called.
func WatchNode(t testing.TB, cs kubernetes.Interface, name string) *NodeWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &NodeWatch{node: name, start: time.Now(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				w.record(nodeProblem(n))
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(w.Stop)
	return w
}

func (w *NodeWatch) record(problem string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	if problem != "" && w.first == nil {
		w.first = fmt.Errorf("node %s %s %.1fs into the watch", w.node, problem, time.Since(w.start).Seconds())
	}
}

// Err is the first problem seen so far, if any.
func (w *NodeWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// Elapsed is the time since the watch began.
func (w *NodeWatch) Elapsed() time.Duration { return time.Since(w.start) }

// Stop ends the watch.
func (w *NodeWatch) Stop() {
	w.cancel()
	<-w.done
}

// Held waits until the watch has run for d (the time a failing CNI STATUS
// takes to show is what is under test) and fails t if the node stopped
// being Ready or was tainted meanwhile.
func (w *NodeWatch) Held(t testing.TB, d time.Duration) {
	t.Helper()
	for time.Since(w.start) < d && w.Err() == nil {
		time.Sleep(200 * time.Millisecond)
	}
	w.Stop()
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	if w.polls < 2 {
		t.Fatalf("node %s read %d times in %v", w.node, w.polls, d)
	}
}

// Eventually is the package's Eventually, failing at once if the watch
// has seen the node NotReady or tainted.
func (w *NodeWatch) Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	Eventually(t, timeout, what, func() error {
		if err := w.Err(); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return cond()
	})
}

// nodeProblem names what is wrong with a node for running pods, or "".
func nodeProblem(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
		}
	}
	for _, taint := range n.Spec.Taints {
		if taint.Key == corev1.TaintNodeNotReady || taint.Key == corev1.TaintNodeUnreachable {
			return fmt.Sprintf("tainted %s:%s", taint.Key, taint.Effect)
		}
	}
	return ""
}
