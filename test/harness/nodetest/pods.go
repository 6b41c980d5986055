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

// KillPodContainer SIGKILLs the pod's container name through the node's
// runtime, as a crash would end it.
func (c *Cluster) KillPodContainer(t testing.TB, p *corev1.Pod, name string) {
	t.Helper()
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == name {
			if err := c.KillContainer(t.Context(), cs.ContainerID); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("pod %s/%s has no container %s: %s", p.Namespace, p.Name, name, PodState(p))
}

// Restarted is nil once the pod's container name has been restarted and
// runs.
func Restarted(p *corev1.Pod, name string) error {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == name && cs.RestartCount > 0 && cs.State.Running != nil {
			return nil
		}
	}
	return fmt.Errorf("container %s not restarted: %s", name, PodState(p))
}
