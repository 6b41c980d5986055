package main

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluicemesh/sluice/daemon/health"
	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/rpc"
	"github.com/sluicemesh/sluice/internal/buildinfo"
)

// inCluster is the --kubeconfig value for the pod's service account.
const inCluster = "in-cluster"

func restConfig(kubeconfig string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == inCluster {
		rc, err = rest.InClusterConfig()
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	rc.UserAgent = "sluice-agent/" + buildinfo.Version
	return rc, nil
}

// newInformers builds the agent's one set of informers (this node's pods,
// every namespace), shared by policy and repair, and the client that reads
// pods: the informers' watches and the policy's direct gets. Writes
// (Events, labels, evictions, annotations) have their own client
// (newEvents), so a burst of them never throttles an ADD's lookup.
func newInformers(cfg *config, rc *rest.Config, log *slog.Logger) (kubernetes.Interface, *kubecache.Cache, error) {
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client for %s: %w", rc.Host, err)
	}
	c, err := kubecache.New(client, cfg.nodeName, log.With("component", "informers", "host", rc.Host))
	return client, c, err
}

func newKubePolicy(cfg *config, client kubernetes.Interface, cache *kubecache.Cache, log *slog.Logger) (*policy.Kube, error) {
	kc := policy.KubeConfig{
		Client:            client,
		Pods:              cache.Pods,
		Namespaces:        cache.Namespaces,
		NodeName:          cfg.nodeName,
		ExcludeNamespaces: splitList(cfg.excludeNamespaces),
		// The agent's own pods only, not its namespace: installed into
		// istio-system, the agent must not exempt istiod's namespace.
		OwnPods: policy.OwnPods{Namespace: cfg.podNamespace, NamePrefix: policy.AgentPodPrefix(cfg.podName)},
		Base:    redirect.DefaultSpec(),
		Log:     log.With("component", "policy"),
	}
	if cfg.ambient {
		sel, err := policy.ParseSelectors(cfg.enablementSelectors())
		if err != nil {
			return nil, fmt.Errorf("--ambient-enablement-selectors: %w", err)
		}
		kc.Ambient = &policy.AmbientConfig{Base: cfg.ambientBase(), DNSCapture: cfg.ambientDNSCapture, Selectors: sel}
	}
	return policy.NewKube(kc)
}

// staticPolicy is the policy without a kubeconfig: --default-mode for every
// pod outside --exclude-namespaces.
func staticPolicy(cfg *config) (rpc.Policy, error) {
	switch cfg.defaultMode {
	case string(redirect.ModeSidecar):
		return policy.NewStatic(redirect.DefaultSpec(), cfg.standaloneSA, splitList(cfg.excludeNamespaces)...)
	case string(redirect.ModeAmbient):
		if !cfg.ambient {
			return nil, fmt.Errorf("--default-mode ambient needs --ambient")
		}
		spec := cfg.ambientBase()
		spec.CaptureDNS = cfg.ambientDNSCapture
		return policy.NewStatic(spec, cfg.standaloneSA, splitList(cfg.excludeNamespaces)...)
	}
	return nil, fmt.Errorf("--default-mode %q: want sidecar or ambient", cfg.defaultMode)
}

// kubePart is Kubernetes policy's side of the agent: the shared informers,
// run in the background, and readiness waiting for their first sync.
type kubePart struct {
	basePart
	informers *kubecache.Cache
	kube      *policy.Kube
	checks    *health.Checks
}

// start runs the informers; every handler is registered by now but
// podcheck's, which waits for the caches to sync and is then sent what
// they hold.
func (p *kubePart) start(ctx context.Context, _ func(error)) error {
	go p.informers.Run(ctx)
	p.checks.Add("policy", p.kube.Synced)
	return nil
}

func (p *kubePart) metrics(m *metrics.Metrics) {
	m.Bool("policy_caches_synced", "1 once the pod and namespace informers have synced.", func() bool {
		ok, _ := p.kube.Synced()
		return ok
	})
}
