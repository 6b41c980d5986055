package kubecache

import (
	"slices"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Namespace is what the cache keeps of a namespace, every node holding
// every namespace (docs/scale.md): its labels, which the ambient
// enablement selectors and the sidecar rules read, and what client-go's
// informer reads of a stored object, its name (the key) and its
// resourceVersion (the store's latest, and whether an update is a resync).
// A *corev1.Namespace holding as much is three times the heap: its
// ObjectMeta alone is over 250 B.
type Namespace struct {
	Name            string
	ResourceVersion string
	// labels are key, value pairs sorted by key, interned: namespaces
	// share their label keys and most of their values. The
	// kubernetes.io/metadata.name label the API server gives every
	// namespace is left out when it is the name (Labels puts it back).
	labels []unique.Handle[string]
}

// compactNamespace is the Namespace the cache keeps of ns.
func compactNamespace(ns *corev1.Namespace) *Namespace {
	n := &Namespace{Name: ns.Name, ResourceVersion: ns.ResourceVersion}
	keys := make([]string, 0, len(ns.Labels))
	for k, v := range ns.Labels {
		if k != metadataName || v != ns.Name {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return n
	}
	slices.Sort(keys)
	n.labels = make([]unique.Handle[string], 0, 2*len(keys))
	for _, k := range keys {
		n.labels = append(n.labels, unique.Make(k), unique.Make(ns.Labels[k]))
	}
	return n
}

// Labels is the namespace's labels as the API server has them: a new
// map, the caller's to keep.
func (n *Namespace) Labels() map[string]string {
	out := make(map[string]string, len(n.labels)/2+1)
	for i := 0; i < len(n.labels); i += 2 {
		out[n.labels[i].Value()] = n.labels[i+1].Value()
	}
	if _, ok := out[metadataName]; !ok && n.Name != "" {
		out[metadataName] = n.Name
	}
	return out
}

// SameLabels is whether n and o have the same labels.
func (n *Namespace) SameLabels(o *Namespace) bool { return slices.Equal(n.labels, o.labels) }

// Object is the namespace as a *corev1.Namespace (name, resourceVersion,
// labels as the API server has them), for code that reads namespaces from
// the API server and the cache alike.
func (n *Namespace) Object() *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion, Labels: n.Labels()}}
}

// GetObjectMeta makes Namespace readable by meta.Accessor, which is how
// client-go reads a stored object's key and resourceVersion.
func (n *Namespace) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}
}

// Namespaces is the cache of every namespace.
type Namespaces struct {
	informer cache.SharedIndexInformer
}

// Informer is the namespace informer, for its sync and its handlers,
// which are handed *Namespace.
func (n *Namespaces) Informer() cache.SharedIndexInformer { return n.informer }

// Get is the cached namespace called name; false when the cache does not
// have it (not synced yet, or its watch behind).
func (n *Namespaces) Get(name string) (*Namespace, bool) {
	obj, ok, err := n.informer.GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return nil, false
	}
	ns, ok := obj.(*Namespace)
	return ns, ok
}
