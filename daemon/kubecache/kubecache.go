// Package kubecache is the agent's one view of the API server: a client-go
// SharedInformerFactory holding this node's pods and every namespace. The
// agent builds it once and hands its informers to policy and to the checks
// of running pods (podcheck, istioadopt's pending list), which read through
// the pod lister and Namespaces.Get and register their handlers on the same
// informers; none opens a watch of its own.
package kubecache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Cache is the shared informers. Objects read from them are the cache's
// own: read them, never change them.
type Cache struct {
	// Pods holds this node's pods only (spec.nodeName).
	Pods coreinformers.PodInformer
	// Namespaces holds every namespace as a Namespace: its name,
	// resourceVersion and labels.
	Namespaces *Namespaces

	factory informers.SharedInformerFactory
	node    string
	log     *slog.Logger
}

// New builds the factory and both informers; Run starts them. client needs
// list and watch on pods and namespaces (deploy/rbac/clusterrole.yaml).
func New(client kubernetes.Interface, nodeName string, log *slog.Logger) (*Cache, error) {
	if client == nil {
		return nil, errors.New("kubernetes informers: no client")
	}
	if nodeName == "" {
		return nil, errors.New("kubernetes informers: node name is empty")
	}
	if log == nil {
		log = slog.Default()
	}
	// Managed fields are most of a pod's bytes and none of our input.
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(stripManagedFields))
	// The factory's WithTweakListOptions would filter every informer, and
	// namespaces have no spec.nodeName. So the pod informer is registered
	// first, filtered to this node, under the factory's key for pods:
	// Core().V1().Pods() then hands out this one, never an unfiltered one.
	onNode := fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
	f.InformerFor(&corev1.Pod{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredPodInformer(c, metav1.NamespaceAll, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			func(o *metav1.ListOptions) { o.FieldSelector = onNode })
	})
	// Every node holds every namespace, so each byte of one counts 10,000
	// times on a large cluster (docs/scale.md): no namespace index (a
	// cluster-scoped object's is one set of every name), and the informer
	// stores compactNamespace's Namespace, not the object. Its requests
	// are client-go's own namespace informer's; only its lister, which
	// expects *corev1.Namespace, is never handed out (Namespaces.Get is).
	namespaces := f.InformerFor(&corev1.Namespace{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewNamespaceInformer(c, resync, cache.Indexers{})
	})
	// InformerFor instantiates each in the factory, so Run starts both.
	c := &Cache{Pods: f.Core().V1().Pods(), Namespaces: &Namespaces{informer: namespaces}, factory: f, node: nodeName, log: log}
	for name, inf := range map[string]cache.SharedIndexInformer{"pods": c.Pods.Informer(), "namespaces": namespaces} {
		log := log.With("informer", name)
		if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			log.Warn("watch failed; retrying", "err", err)
		}); err != nil {
			return nil, fmt.Errorf("kubernetes informers: %s: %w", name, err)
		}
	}
	return c, nil
}

func stripManagedFields(obj any) (any, error) {
	if ns, ok := obj.(*corev1.Namespace); ok {
		return compactNamespace(ns), nil
	}
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// metadataName is the label the API server gives every namespace, its name.
const metadataName = "kubernetes.io/metadata.name"

// NamespaceLabels is ns's labels as the API server has them, for a
// namespace from the API server (a GET when the cache is behind) or one
// written without kubernetes.io/metadata.name, which the API server would
// add (nil: none).
func NamespaceLabels(ns *corev1.Namespace) map[string]string {
	if ns == nil {
		return nil
	}
	if _, ok := ns.Labels[metadataName]; ok || ns.Name == "" {
		return ns.Labels
	}
	out := make(map[string]string, len(ns.Labels)+1)
	for k, v := range ns.Labels {
		out[k] = v
	}
	out[metadataName] = ns.Name
	return out
}

// Run runs the informers until ctx ends, and returns once they have
// stopped. Handlers registered before Run see every object from the first
// list; those registered later are first sent what is cached.
func (c *Cache) Run(ctx context.Context) {
	c.log.Info("starting pod and namespace informers", "node", c.node)
	c.factory.Start(ctx.Done())
	<-ctx.Done()
	c.factory.Shutdown()
}

// DeletedPod is the pod of an informer's delete notification, which may
// come as a tombstone when the watch missed the delete itself.
func DeletedPod(obj any) (*corev1.Pod, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok
}
