package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// KubeConfig configures the Kubernetes policy.
type KubeConfig struct {
	// Rest reaches the API server; the identity needs list/watch on pods
	// and namespaces and get on pods (deploy/rbac/clusterrole.yaml).
	Rest *rest.Config
	// NodeName is this node: only its pods are cached.
	NodeName string
	// Pods in these namespaces are passed through without asking the API
	// server: kube-system and the agent's own namespace, so the agent's
	// pod starts even when nothing else can.
	ExcludeNamespaces []string
	// Base is the capture a pod gets before its annotations apply.
	Base redirect.Spec
	// LookupWait is how long an ADD waits for a pod missing from the cache
	// before it asks the API server directly. Default 1s.
	LookupWait time.Duration
	// Ambient, when set, enrols ambient pods; nil passes them through.
	Ambient *AmbientConfig
	Log     *slog.Logger
}

// Kube decides from pod and namespace metadata, the way istio-cni does.
type Kube struct {
	cfg        KubeConfig
	client     kubernetes.Interface
	pods       cache.SharedIndexInformer
	namespaces cache.SharedIndexInformer
	arrivals   *arrivals
	log        *slog.Logger
}

// NewKube validates cfg and sets up the informers; Run starts them.
func NewKube(cfg KubeConfig) (*Kube, error) {
	if cfg.Rest == nil {
		return nil, errors.New("kubernetes policy: no API server config")
	}
	if cfg.NodeName == "" {
		return nil, errors.New("kubernetes policy: node name is empty")
	}
	if err := cfg.Base.Validate(); err != nil {
		return nil, fmt.Errorf("kubernetes policy: base spec: %w", err)
	}
	if cfg.LookupWait <= 0 {
		cfg.LookupWait = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	client, err := kubernetes.NewForConfig(cfg.Rest)
	if err != nil {
		return nil, fmt.Errorf("kubernetes policy: client for %s: %w", cfg.Rest.Host, err)
	}
	k := &Kube{cfg: cfg, client: client, arrivals: newArrivals(), log: cfg.Log}

	onNode := fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	k.pods = coreinformers.NewFilteredPodInformer(client, metav1.NamespaceAll, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = onNode })
	k.namespaces = coreinformers.NewNamespaceInformer(client, 0, cache.Indexers{})
	for name, inf := range map[string]cache.SharedIndexInformer{"pods": k.pods, "namespaces": k.namespaces} {
		// Managed fields are most of a pod's bytes and none of our input.
		if err := inf.SetTransform(stripManagedFields); err != nil {
			return nil, fmt.Errorf("kubernetes policy: %s informer: %w", name, err)
		}
		log := k.log.With("informer", name)
		if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			log.Warn("watch failed; retrying", "err", err)
		}); err != nil {
			return nil, fmt.Errorf("kubernetes policy: %s informer: %w", name, err)
		}
	}
	wake := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			k.arrivals.arrived(key)
		}
	}
	if _, err := k.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, obj any) { wake(obj) },
	}); err != nil {
		return nil, fmt.Errorf("kubernetes policy: pod event handler: %w", err)
	}
	return k, nil
}

func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Run runs the informers until ctx ends.
func (k *Kube) Run(ctx context.Context) {
	k.log.Info("starting pod and namespace informers", "node", k.cfg.NodeName, "host", k.cfg.Rest.Host)
	done := make(chan struct{}, 2)
	for _, inf := range []cache.SharedIndexInformer{k.pods, k.namespaces} {
		go func() { inf.Run(ctx.Done()); done <- struct{}{} }()
	}
	<-done
	<-done
}

// Synced is the policy's part of /readyz: false until both caches have
// listed once, so the agent takes no pods it would have to look up one by
// one.
func (k *Kube) Synced() (bool, string) {
	var missing []string
	if !k.pods.HasSynced() {
		missing = append(missing, "pods")
	}
	if !k.namespaces.HasSynced() {
		missing = append(missing, "namespaces")
	}
	if len(missing) > 0 {
		return false, fmt.Sprintf("kubernetes policy: %v cache not synced", missing)
	}
	return true, ""
}

// Decide looks the pod up and applies Istio's sidecar rules to it.
func (k *Kube) Decide(ctx context.Context, p Pod) (Decision, error) {
	if slices.Contains(k.cfg.ExcludeNamespaces, p.Namespace) {
		// Decided before any lookup: these pods include the agent itself,
		// which must start even when the API server is away.
		return Decision{Reason: "namespace " + p.Namespace + " is excluded",
			Inputs: []string{"--exclude-namespaces: " + p.Namespace}}, nil
	}
	pod, err := k.lookup(ctx, p)
	if err != nil {
		return Decision{}, err
	}
	var ns *corev1.Namespace
	if obj, ok, _ := k.namespaces.GetStore().GetByKey(p.Namespace); ok {
		ns = obj.(*corev1.Namespace)
	}
	d, err := k.decidePod(pod, ns)
	if err != nil {
		return Decision{}, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return d, nil
}

// decidePod is the decision for a pod as the cache holds it.
func (k *Kube) decidePod(pod *corev1.Pod, ns *corev1.Namespace) (Decision, error) {
	var d Decision
	var err error
	if k.cfg.Ambient != nil && isAmbient(pod, ns) {
		d, err = decideAmbient(pod, *k.cfg.Ambient)
	} else {
		d, err = decideSidecar(pod, ns, k.cfg.Base)
	}
	d.ServiceAccount = pod.Spec.ServiceAccountName
	return d, err
}
