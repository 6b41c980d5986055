package policy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// These accessors let other parts of the agent (repair) work from the
// policy's pod cache instead of opening a second watch on the same pods.
// Objects they hand out are the cache's own: read them, never change them.

// AddPodHandler registers h for this node's pods. Registered on a running
// informer, h is first sent an add for every pod already cached; the
// registration's HasSynced reports when that replay is delivered. h runs on
// the informer's goroutine and must not block.
func (k *Kube) AddPodHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	reg, err := k.pods.AddEventHandler(h)
	if err != nil {
		return nil, fmt.Errorf("kubernetes policy: add pod event handler: %w", err)
	}
	return reg, nil
}

// CachedPod returns a pod of this node from the cache, without asking the
// API server.
func (k *Kube) CachedPod(namespace, name string) (*corev1.Pod, bool) {
	return k.cached(namespace+"/"+name, "")
}

// AddNamespaceHandler registers h for namespaces, like AddPodHandler.
func (k *Kube) AddNamespaceHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	reg, err := k.namespaces.AddEventHandler(h)
	if err != nil {
		return nil, fmt.Errorf("kubernetes policy: add namespace event handler: %w", err)
	}
	return reg, nil
}

// CachedPodKeys lists the "namespace/name" keys of this node's cached pods
// in namespace.
func (k *Kube) CachedPodKeys(namespace string) []string {
	var keys []string
	for _, key := range k.pods.GetStore().ListKeys() {
		if ns, _, err := cache.SplitMetaNamespaceKey(key); err == nil && ns == namespace {
			keys = append(keys, key)
		}
	}
	return keys
}
