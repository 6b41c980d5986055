package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
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

func newKubePolicy(cfg *config, rc *rest.Config, log *slog.Logger) (*policy.Kube, error) {
	kc := policy.KubeConfig{
		Rest:              rc,
		NodeName:          cfg.nodeName,
		ExcludeNamespaces: splitList(cfg.excludeNamespaces),
		// The agent's own pods only, not its namespace: installed into
		// istio-system, the agent must not exempt istiod's namespace.
		OwnPods: policy.OwnPods{Namespace: cfg.podNamespace, NamePrefix: policy.AgentPodPrefix(cfg.podName)},
		Base:    redirect.DefaultSpec(),
		Log:     log.With("component", "policy"),
	}
	if cfg.ambient {
		sel, err := policy.ParseSelectors(cfg.ambientSelectors)
		if err != nil {
			return nil, fmt.Errorf("--ambient-enablement-selectors: %w", err)
		}
		kc.Ambient = &policy.AmbientConfig{Base: redirect.DefaultAmbientSpec(), DNSCapture: cfg.ambientDNSCapture, Selectors: sel}
	}
	return policy.NewKube(kc)
}

// daemonSetLeaving says whether the agent's own DaemonSet is gone or being
// deleted (an uninstall), as opposed to rolling (an upgrade or a restart),
// where the conflist entry must stay so new pods wait for the new agent.
func daemonSetLeaving(ctx context.Context, rc *rest.Config, namespace, pod string) (bool, string) {
	if namespace == "" || pod == "" {
		return false, "own pod unknown (--pod-name/--pod-namespace); keeping the entry"
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return false, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, err := client.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	switch {
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		// An uninstall deletes the ServiceAccount and its role together
		// with the DaemonSet; an upgrade keeps them. Keeping the entry here
		// would leave every new pod on the node failing its ADD.
		return true, fmt.Sprintf("lost API access (%v): the agent's RBAC was removed with it", err)
	case err != nil:
		return false, fmt.Sprintf("get own pod %s/%s: %v; keeping the entry", namespace, pod, err)
	}
	for _, ref := range p.OwnerReferences {
		if ref.Kind != "DaemonSet" {
			continue
		}
		ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, "DaemonSet " + ref.Name + " is gone"
		case err != nil:
			return false, fmt.Sprintf("get DaemonSet %s: %v; keeping the entry", ref.Name, err)
		case ds.DeletionTimestamp != nil:
			return true, "DaemonSet " + ref.Name + " is being deleted"
		case ds.UID != ref.UID:
			return true, "DaemonSet " + ref.Name + " was replaced"
		}
		return false, "DaemonSet " + ref.Name + " stays (upgrade or restart)"
	}
	return false, "own pod has no DaemonSet owner; keeping the entry"
}
