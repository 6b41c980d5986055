package controlplane

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/late"
	"github.com/sluicemesh/sluice/daemon/policy"
)

// Objects in: namespaces and pods as the API server holds them, and the
// changes a scenario makes to them.

// Namespace creates a namespace with labels.
func (n *Node) Namespace(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: maps.Clone(labels)}}
	if _, err := n.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// Relabel replaces a namespace's labels, as `kubectl label` does.
func (n *Node) Relabel(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	ns, err := n.Client.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = maps.Clone(labels)
	if _, err := n.Client.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("relabel namespace %s: %v", name, err)
	}
}

// Pod is a pod as a scenario writes it.
type Pod struct {
	Namespace, Name string
	Labels          map[string]string
	Annotations     map[string]string
	// Injected is a pod Istio's injector gave a sidecar.
	Injected bool
}

// UID is the pod's uid: the fake clientset assigns none, so it is derived
// from the pod's name.
func (p Pod) UID() types.UID { return types.UID("uid-" + p.Namespace + "-" + p.Name) }

// Key is namespace/name, the informers' key.
func (p Pod) Key() string { return p.Namespace + "/" + p.Name }

func (p Pod) object() *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID(),
			Labels: maps.Clone(p.Labels), Annotations: maps.Clone(p.Annotations)},
		Spec: corev1.PodSpec{NodeName: NodeName, ServiceAccountName: "default",
			Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if p.Injected {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations["sidecar.istio.io/status"] = `{"containers":["istio-proxy"]}`
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "istio-proxy", Image: "proxyv2"})
	}
	return pod
}

// Created puts a pod scheduled to the node that has no sandbox yet: the
// object a CNI ADD is decided from.
func (n *Node) Created(t *testing.T, p Pod) *corev1.Pod {
	t.Helper()
	got, err := n.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p.object(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", p.Key(), err)
	}
	return got
}

// Running puts a pod whose sandbox is up: a netns the agent can find under
// Proc (by the pod's cgroup) and open through Netns, and the status a
// kubelet writes. It returns the netns path.
func (n *Node) Running(t *testing.T, p Pod) string {
	t.Helper()
	path := n.Proc.Sandbox(t, string(p.UID()))
	n.Netns.Add(path)
	pod := p.object()
	ip := n.ip()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}}
	if _, err := n.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", p.Key(), err)
	}
	return path
}

// Update changes a pod's labels and annotations (nil keeps them), as a
// `kubectl label` or `annotate` does.
func (n *Node) Update(t *testing.T, p Pod, labels, annotations map[string]string) {
	t.Helper()
	pod := n.Get(t, p)
	if labels != nil {
		pod.Labels = maps.Clone(labels)
	}
	if annotations != nil {
		pod.Annotations = maps.Clone(annotations)
	}
	if _, err := n.Client.CoreV1().Pods(p.Namespace).Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pod %s: %v", p.Key(), err)
	}
}

// Get reads the pod as the API server holds it now.
func (n *Node) Get(t *testing.T, p Pod) *corev1.Pod {
	t.Helper()
	pod, err := n.Client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", p.Key(), err)
	}
	return pod
}

// ip hands out the node's pod addresses in order.
func (n *Node) ip() netip.Addr {
	n.nextIP++
	return netip.MustParseAddr(fmt.Sprintf("10.244.0.%d", 10+n.nextIP))
}

// CacheBehind drops a namespace from the agent's namespace cache, as when
// it was created just before its pod and the watch has not brought it
// yet: policy must then read it from the API server.
func (n *Node) CacheBehind(t *testing.T, name string) {
	t.Helper()
	store := n.Cache.Namespaces.Informer().GetStore()
	obj, ok, err := store.GetByKey(name)
	if err != nil || !ok {
		t.Fatalf("namespace %s is not cached: %v", name, err)
	}
	if err := store.Delete(obj); err != nil {
		t.Fatal(err)
	}
}

// Enrolled enrols a running pod whose netns is at path as the agent would
// have (under its late id, with what policy decides now): a pod sluice
// holds from before. Call it after Start: policy reads the caches.
func (n *Node) Enrolled(t *testing.T, p Pod, path string) {
	t.Helper()
	pod := n.Get(t, p)
	d, err := n.Policy.Decide(context.Background(), policy.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID())})
	if err != nil || !d.Capture {
		t.Fatalf("policy for %s: %+v, %v", p.Key(), d, err)
	}
	if err := n.Store.Enroll(context.Background(), late.Record(pod, d, path)); err != nil {
		t.Fatalf("enrol %s: %v", p.Key(), err)
	}
}

// Cached waits until the agent's caches hold the API server's current
// pod p and its namespace (a change made just before has reached the
// informers) and returns the pod as the agent reads it. Labels and
// annotations, what policy reads, are compared: client-go's fake keeps no
// resourceVersion, and the caches trim what they hold.
func (n *Node) Cached(t *testing.T, p Pod) *corev1.Pod {
	t.Helper()
	ns, err := n.Client.CoreV1().Namespaces().Get(context.Background(), p.Namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := n.Get(t, p)
	var got *corev1.Pod
	n.Eventually(t, func() bool {
		cachedNS, ok := n.Cache.Namespaces.Get(p.Namespace)
		if !ok || !maps.Equal(cachedNS.Labels(), kubecache.NamespaceLabels(ns)) {
			return false
		}
		got, err = n.Cache.Pods.Lister().Pods(p.Namespace).Get(p.Name)
		return err == nil && maps.Equal(got.Labels, want.Labels) && maps.Equal(got.Annotations, want.Annotations)
	}, "the caches never caught up with pod %s and its namespace", p.Key())
	return got
}

// Sandbox is a new sandbox of pod p as the runtime hands it to a CNI ADD:
// the netns path (opened through Netns) and the address the primary CNI
// gave it.
func (n *Node) Sandbox(t *testing.T, p Pod) (netnsPath string, ip netip.Addr) {
	t.Helper()
	n.sandboxes++
	netnsPath = fmt.Sprintf("/var/run/netns/cni-%d", n.sandboxes)
	n.Netns.Add(netnsPath)
	return netnsPath, n.ip()
}
