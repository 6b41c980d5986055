package nodetest

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The small helpers every suite on the test cluster (test/node, test/peer,
// test/lifecycle, test/mesh) waits and reports with.

// Eventually polls cond every 100 ms until it returns nil, and fails t
// with cond's last error once timeout has passed.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PodReady says whether the pod's Ready condition is true.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodState names a pod's phase and each container's state, for failure
// messages.
func PodState(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf(" %s=waiting(%s: %s)", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Running != nil:
			s += fmt.Sprintf(" %s=running", cs.Name)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf(" %s=terminated(%d)", cs.Name, cs.State.Terminated.ExitCode)
		}
	}
	return s
}
