package peer

// Copied from test/node (a test package cannot import another's helpers):
// the same watch, so both suites call a node "held" by the same rule.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeWatch records the first moment a node stops being Ready or is
// tainted not-ready or unreachable, as the node lifecycle controller does
// before it evicts.
type nodeWatch struct {
	node   string
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	first error // the first problem seen, with when
	polls int
}

// watchNode polls the node's status every 200 ms until the test ends or
// stop is called.
func watchNode(t *testing.T, name string) *nodeWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &nodeWatch{node: name, start: time.Now(), cancel: cancel, done: make(chan struct{})}
	cs := client(t)
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
	t.Cleanup(w.stop)
	return w
}

func (w *nodeWatch) record(problem string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	if problem != "" && w.first == nil {
		w.first = fmt.Errorf("node %s %s %.1fs into the watch", w.node, problem, time.Since(w.start).Seconds())
	}
}

// err is the first problem seen so far, if any.
func (w *nodeWatch) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// stop ends the watch.
func (w *nodeWatch) stop() {
	w.cancel()
	<-w.done
}

// held waits until the watch has run for d (the time a failing CNI STATUS
// takes to show is what is under test) and fails t if the node stopped
// being Ready or was tainted meanwhile.
func (w *nodeWatch) held(t *testing.T, d time.Duration) {
	t.Helper()
	for time.Since(w.start) < d && w.err() == nil {
		time.Sleep(200 * time.Millisecond)
	}
	w.stop()
	if err := w.err(); err != nil {
		t.Fatal(err)
	}
	if w.polls < 2 {
		t.Fatalf("node %s read %d times in %v", w.node, w.polls, d)
	}
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
