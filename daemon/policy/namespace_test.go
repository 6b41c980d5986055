package policy

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// staleNamespaces is a Kube policy, as the agent's identity, whose pod
// cache runs and whose namespace cache never fills: a namespace created
// just before its pod, with the namespace watch behind.
func staleNamespaces(t *testing.T, client kubernetes.Interface) *Kube {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	c, err := kubecache.New(client, node, log)
	if err != nil {
		t.Fatal(err)
	}
	// A second cache, never run: its namespace informer stays empty.
	idle, err := kubecache.New(client, node, log)
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKube(KubeConfig{Client: client, Pods: c.Pods, Namespaces: idle.Namespaces, NodeName: node,
		Base: redirect.DefaultSpec(), LookupWait: 100 * time.Millisecond, Log: log,
		Ambient: &AmbientConfig{Base: redirect.DefaultAmbientSpec(), DNSCapture: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	nstest.Eventually(t, 30*time.Second, func() bool { return c.Pods.Informer().HasSynced() }, "pod cache to sync")
	return k
}

// When the API server cannot say what the namespace is, the ADD fails
// (the runtime retries): a guess could start an ambient pod uncaptured.
func TestKubeNamespaceUnknownFailsTheAdd(t *testing.T) {
	client := fake.NewSimpleClientset(injectedIn("shop"))
	client.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is gone")
	})
	k := staleNamespaces(t, client)
	_, err := decide(t, k, Pod{Namespace: "shop", Name: "p"})
	if err == nil || !strings.Contains(err.Error(), "namespace shop") || !strings.Contains(err.Error(), "etcd is gone") {
		t.Fatalf("ADD with the namespace unknown: %v, want an error naming the namespace and the cause", err)
	}

	// A namespace the API server does not have either: the pod's own
	// labels decide (the pod is about to go too).
	gone := fake.NewSimpleClientset(injectedIn("shop"))
	gone.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "shop")
	})
	if d, err := decide(t, staleNamespaces(t, gone), Pod{Namespace: "shop", Name: "p"}); err != nil || !d.Capture {
		t.Errorf("namespace gone: %+v %v, want the injected pod captured", d, err)
	}
}

// injectedIn is an injected pod "p" in ns on this node, for a fake client.
func injectedIn(ns string) *corev1.Pod {
	return injected(func(p *corev1.Pod) { p.Namespace, p.Name, p.Spec.NodeName = ns, "p", node })
}
