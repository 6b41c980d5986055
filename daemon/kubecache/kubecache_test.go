package kubecache

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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
	if _, ok := c.Namespaces.Get("shop"); !ok {
		t.Error("namespace shop is not cached")
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

// Every node caches every namespace, so what one costs is multiplied by
// the cluster's namespaces (docs/scale.md): 10,000 namespaces as the API
// server writes them hold at most 200 B of heap each (423 B when the cache
// kept a trimmed *corev1.Namespace, 819 B whole), and as many labelled as
// a mesh's namespaces are (injection, a team: keys and most values shared)
// at most 250 B. Their labels still read as the API server has them.
func TestCacheHoldsNamespacesSmall(t *testing.T) {
	for _, tc := range []struct {
		name     string
		labels   func(i int) map[string]string
		maxBytes int64
	}{
		{"as written", func(int) map[string]string { return nil }, 200},
		{"labelled", func(i int) map[string]string {
			return map[string]string{"istio-injection": "enabled", "team": fmt.Sprintf("team-%02d", i%40)}
		}, 250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, perNamespace := cacheNamespaces(t, 10000, tc.labels)
			t.Logf("%d B of heap per cached namespace", perNamespace)
			if perNamespace > tc.maxBytes {
				t.Errorf("the cache holds %d B of heap per namespace, want at most %d", perNamespace, tc.maxBytes)
			}
			want := map[string]string{"kubernetes.io/metadata.name": "fleet-ns-00007"}
			maps.Copy(want, tc.labels(7))
			for name, want := range map[string]map[string]string{
				"fleet-ns-00007": want,
				"mesh":           {"kubernetes.io/metadata.name": "mesh", "istio.io/dataplane-mode": "ambient"},
			} {
				ns, ok := c.Namespaces.Get(name)
				if !ok {
					t.Fatalf("namespace %s is not cached", name)
				}
				if got := ns.Labels(); !maps.Equal(got, want) {
					t.Errorf("labels of %s = %v, want %v", name, got, want)
				}
			}
		})
	}
}

// cacheNamespaces runs a Cache over n namespaces as the API server writes
// them, with labels(i) besides kubernetes.io/metadata.name, and one more,
// "mesh", labelled ambient; it returns the cache and the heap it holds per
// namespace once synced.
func cacheNamespaces(t *testing.T, n int, labels func(i int) map[string]string) (*Cache, int64) {
	objs := make([]runtime.Object, 0, n+1)
	for i := range n {
		name := fmt.Sprintf("fleet-ns-%05d", i)
		l := map[string]string{"kubernetes.io/metadata.name": name}
		maps.Copy(l, labels(i))
		objs = append(objs, &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("0a1b2c3d-0000-4000-8000-%012d", i)),
				ResourceVersion: strconv.Itoa(100000 + i), CreationTimestamp: metav1.Now(), Labels: l},
			Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
			Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}})
	}
	objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mesh",
		Labels: map[string]string{"kubernetes.io/metadata.name": "mesh", "istio.io/dataplane-mode": "ambient"}}})
	client := fake.NewClientset(objs...)
	objs = nil
	before := heapAfterGC()
	c := run(t, client, &syncedLog{})
	nstest.Eventually(t, 60*time.Second, func() bool {
		return c.Namespaces.Informer().HasSynced() && len(c.Namespaces.Informer().GetStore().ListKeys()) == n+1
	}, "the namespaces to be cached")
	return c, (heapAfterGC() - before) / int64(n)
}

func heapAfterGC() int64 {
	var m goruntime.MemStats
	goruntime.GC()
	goruntime.GC()
	goruntime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// A namespace's label change reaches the handlers as two Namespaces whose
// labels differ (podcheck re-checks the namespace's pods on it).
func TestCacheHandsOnNamespaceLabelChanges(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ResourceVersion: "1"}})
	c := run(t, client, &syncedLog{})
	changed := make(chan [2]*Namespace, 4)
	if _, err := c.Namespaces.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) { changed <- [2]*Namespace{old.(*Namespace), obj.(*Namespace)} },
	}); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 30*time.Second, c.Namespaces.Informer().HasSynced, "the namespace cache to sync")
	ambient := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ResourceVersion: "2",
		Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}}
	if _, err := client.CoreV1().Namespaces().Update(t.Context(), ambient, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-changed:
		if u[1].SameLabels(u[0]) || u[1].Labels()["istio.io/dataplane-mode"] != "ambient" {
			t.Errorf("update from %v to %v, want the ambient label added", u[0].Labels(), u[1].Labels())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the label change never reached the handler")
	}
}
