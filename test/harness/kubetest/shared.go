package kubetest

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Shared is one Env for a test package, started on first use (so tests
// that need no API server never pay for it) with User bound to the
// ClusterRole in RBACFile. Call Stop from TestMain.
type Shared struct {
	User, RBACFile string

	once sync.Once
	env  *Env
	stop func()
	err  error
}

// Get returns the Env, starting it on first call. If the API server
// cannot start, the first test to ask fails saying why and the later ones
// skip, pointing at it (see outage).
func (s *Shared) Get(t testing.TB) *Env {
	t.Helper()
	s.once.Do(func() {
		if s.err = down.get(); s.err != nil {
			return
		}
		s.env, s.stop, s.err = StartMain(s.User)
		if s.err == nil && s.RBACFile != "" {
			s.err = s.env.BindClusterRole(s.User, s.RBACFile)
		}
	})
	if s.err != nil {
		down.report(t, s.err)
	}
	return s.env
}

// Stop stops the Env if it was started.
func (s *Shared) Stop() {
	if s.stop != nil {
		s.stop()
	}
}

// WaitPodEvent waits up to 10 s for an Event with reason on pod.
func WaitPodEvent(t testing.TB, c kubernetes.Interface, pod *corev1.Pod, reason string) corev1.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := c.CoreV1().Events(pod.Namespace).List(context.Background(), metav1.ListOptions{})
		if err == nil {
			for _, ev := range l.Items {
				if ev.InvolvedObject.UID == pod.UID && ev.Reason == reason {
					return ev
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event on pod %s/%s after 10s", reason, pod.Namespace, pod.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
