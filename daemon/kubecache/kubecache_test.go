package kubecache

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/syncbuf"
)

// The cache's own logic (what it keeps of an object, the replay to a late
// handler, the logged watch failure) runs on client-go's fake clientset;
// apiserver_test.go holds what needs a real kube-apiserver: the agent's
// RBAC and the server's filtering of pods to this node.

const node = "node-a"

// syncedLog is a log the informers' goroutines write while the test reads.
type syncedLog = syncbuf.Buffer

// run runs a Cache for node over client until t ends.
func run(t *testing.T, client kubernetes.Interface, log *syncedLog) *Cache {
	t.Helper()
	c, err := New(client, node, slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// The cache keeps objects without their managed fields (most of a pod's
// bytes, none of our input), and a handler registered late is sent what
// is cached (repair's sweep at start depends on it).
func TestCacheStripsManagedFieldsAndReplays(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ManagedFields: managed}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "here", Namespace: "shop", ManagedFields: managed},
		Spec: corev1.PodSpec{NodeName: node}}
	c := run(t, fake.NewClientset(ns, pod), &syncedLog{})
	nstest.Eventually(t, 30*time.Second, func() bool {
		return c.Pods.Informer().HasSynced() && c.Namespaces.Informer().HasSynced()
	}, "the caches to sync")

	if got, err := c.Pods.Lister().Pods("shop").Get("here"); err != nil || len(got.ManagedFields) != 0 {
		t.Errorf("pod shop/here: %v, %v; want it cached without managed fields", got, err)
	}
	if got, err := c.Namespaces.Lister().Get("shop"); err != nil || len(got.ManagedFields) != 0 {
		t.Errorf("namespace shop: %v, %v; want it cached without managed fields", got, err)
	}

	seen := make(chan string, 16)
	reg, err := c.Pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { seen <- obj.(*corev1.Pod).Name },
	})
	if err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 10*time.Second, reg.HasSynced, "the handler's replay")
	select {
	case name := <-seen:
		if name != "here" {
			t.Errorf("replay sent %s, want here", name)
		}
	default:
		t.Error("a handler registered after sync was sent nothing")
	}
}

// A list or watch that fails is logged, naming the informer, and retried.
func TestCacheLogsWatchFailures(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewUnauthorized("not-a-token")
	})
	log := &syncedLog{}
	run(t, client, log)
	nstest.Eventually(t, 30*time.Second, func() bool {
		l := log.String()
		return strings.Count(l, `msg="watch failed; retrying"`) >= 2 &&
			strings.Contains(l, "informer=pods") && strings.Contains(l, "informer=namespaces")
	}, "a logged list failure of each informer: %v", log)
}
