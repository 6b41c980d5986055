package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/redirect"
)

// KubeConfig configures the Kubernetes policy.
type KubeConfig struct {
	// Client asks the API server for a pod the cache does not have yet;
	// the identity needs get on pods (deploy/rbac/clusterrole.yaml).
	Client kubernetes.Interface
	// Pods and Namespaces are the agent's shared informers
	// (daemon/kubecache): this node's pods, every namespace. The policy
	// reads through the pod lister and Namespaces.Get, reports their sync,
	// and registers on Pods the handler that wakes lookups waiting for a
	// new pod.
	Pods       coreinformers.PodInformer
	Namespaces *kubecache.Namespaces
	// NodeName is this node, named in errors.
	NodeName string
	// Pods in these namespaces are passed through without asking the API
	// server (kube-system by default).
	ExcludeNamespaces []string
	// OwnPods are the agent's own pods, passed through without asking the
	// API server so they start even when nothing else can: the agent's
	// namespace, and the name prefix of its DaemonSet's pods (see
	// AgentPodPrefix), as istio-cni skips istio-cni-node-* in its own
	// namespace. The rest of that namespace is decided as any other.
	OwnPods OwnPods
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
	cfg              KubeConfig
	pods             corev1listers.PodLister
	podsSynced       cache.InformerSynced
	namespacesSynced cache.InformerSynced
	arrivals         *arrivals
	log              *slog.Logger
}

// NewKube validates cfg and registers the policy on the pod informer; the
// agent runs the informers.
func NewKube(cfg KubeConfig) (*Kube, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("kubernetes policy: no API server client")
	case cfg.Pods == nil || cfg.Namespaces == nil:
		return nil, errors.New("kubernetes policy: no pod or namespace informer")
	case cfg.NodeName == "":
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
	pods, namespaces := cfg.Pods.Informer(), cfg.Namespaces.Informer()
	k := &Kube{cfg: cfg, pods: cfg.Pods.Lister(),
		podsSynced: pods.HasSynced, namespacesSynced: namespaces.HasSynced, arrivals: newArrivals(), log: cfg.Log}
	wake := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			k.arrivals.arrived(key)
		}
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, obj any) { wake(obj) },
	}); err != nil {
		return nil, fmt.Errorf("kubernetes policy: pod event handler: %w", err)
	}
	return k, nil
}

// Synced is the policy's part of /readyz: false until both caches have
// listed once, so the agent takes no pods it would have to look up one by
// one.
func (k *Kube) Synced() (bool, string) {
	var missing []string
	if !k.podsSynced() {
		missing = append(missing, "pods")
	}
	if !k.namespacesSynced() {
		missing = append(missing, "namespaces")
	}
	if len(missing) > 0 {
		return false, fmt.Sprintf("kubernetes policy: %v cache not synced", missing)
	}
	return true, ""
}

// Decide looks the pod up and applies Istio's rules to it.
func (k *Kube) Decide(ctx context.Context, p Pod) (Decision, error) {
	// Decided before any lookup, as istio-cni does, so these never wait
	// for the API server.
	switch {
	case p.Name == "" || p.Namespace == "":
		// Not a Kubernetes pod (a runtime call without K8S_POD_NAME):
		// there is nothing to look up, and istio-cni lets it through.
		return Decision{Reason: "not a Kubernetes pod: no K8S_POD_NAME or K8S_POD_NAMESPACE"}, nil
	case slices.Contains(k.cfg.ExcludeNamespaces, p.Namespace):
		return excludedNamespace(p.Namespace), nil
	case k.cfg.OwnPods.Match(p):
		return Decision{Reason: "the agent's own pod", Inputs: []string{"--pod-name: " + k.cfg.OwnPods.NamePrefix + "*"}}, nil
	}
	pod, err := k.lookup(ctx, p)
	if err != nil {
		return Decision{}, err
	}
	ns, err := k.namespace(ctx, p.Namespace)
	if err != nil {
		return Decision{}, err
	}
	d, err := Rules{Sidecar: k.cfg.Base, Ambient: k.cfg.Ambient}.Decide(pod, ns, p.IPs)
	if err != nil {
		return Decision{}, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	for _, w := range d.Warnings {
		k.log.Warn("pod input ignored", "pod", p.Namespace+"/"+p.Name, "input", w)
	}
	return d, nil
}

// namespace is the pod's namespace from the cache, or from the API server
// when the cache does not have it yet (created just before its pod, with
// the namespace watch behind). Its labels can make the pod ambient, so a
// guess could start a pod of an ambient namespace outside the mesh; Istio's
// plugin GETs it too. An API server that cannot answer fails the ADD (the
// runtime retries); a namespace it does not have either is nil, and the
// pod's own labels decide.
func (k *Kube) namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	if ns, ok := k.cfg.Namespaces.Get(name); ok {
		return ns.Object(), nil
	}
	ns, err := k.cfg.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("namespace %s: not in the cache, and getting it from the API server failed: %w", name, err)
	}
	k.log.Info("namespace found by direct get; the cache was behind", "namespace", name)
	return ns, nil
}
