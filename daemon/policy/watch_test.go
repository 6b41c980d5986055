package policy

import (
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/nstest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

func TestKubePodHandlerAndCache(t *testing.T) {
	k := startPolicy(t, time.Second)
	_, c := kube(t)
	ns := namespace(t, c, nil)
	before := createPod(t, c, ns, node, injected(func(p *corev1.Pod) { p.Name = "before" }))
	nstest.Eventually(t, 10*time.Second, func() bool {
		_, ok := k.CachedPod(ns, before.Name)
		return ok
	}, "the cache to hold the pod")

	seen := make(chan string, 16)
	reg, err := k.AddPodHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p := obj.(*corev1.Pod); p.Namespace == ns {
				seen <- p.Name
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 10*time.Second, reg.HasSynced, "the handler's replay")
	expectName(t, seen, before.Name, "replay of a pod cached before the handler")

	after := createPod(t, c, ns, node, injected(func(p *corev1.Pod) { p.Name = "after" }))
	expectName(t, seen, after.Name, "a pod added later")
	createPod(t, c, ns, otherNode, injected(func(p *corev1.Pod) { p.Name = "elsewhere" }))
	got, ok := k.CachedPod(ns, after.Name)
	if !ok || string(got.UID) != after.UID {
		t.Errorf("CachedPod(%s, %s) = %v, %v; want uid %s", ns, after.Name, got, ok, after.UID)
	}
	if _, ok := k.CachedPod(ns, "elsewhere"); ok {
		t.Error("the cache holds a pod of another node")
	}
}

func expectName(t *testing.T, seen <-chan string, want, what string) {
	t.Helper()
	select {
	case got := <-seen:
		if got != want {
			t.Fatalf("%s: handler saw %s, want %s", what, got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: handler never saw %s", what, want)
	}
}
