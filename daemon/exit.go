package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Is this SIGTERM an uninstall or an upgrade? An uninstall removes the
// conflist entry (pods on the node start without sluice, as before it was
// installed); an upgrade or a restart keeps it, so new pods wait for the
// next agent instead of starting uncaptured.

// uninstallOnExit decides whether SIGTERM removes our entry. Standalone,
// yes. In Kubernetes only when the agent's DaemonSet is going away: an
// upgrade keeps it, so new pods wait for the new agent instead of starting
// uncaptured.
func uninstallOnExit(cfg *config, rc *rest.Config, log *slog.Logger) bool {
	switch cfg.uninstallOnExit {
	case "true":
		return true
	case "false":
		return false
	}
	if rc == nil {
		return true
	}
	leaving, why := daemonSetLeaving(context.Background(), rc, cfg.podNamespace, cfg.podName, cfg.nodeName)
	log.Info("conflist entry on exit", "remove", leaving, "why", why)
	return leaving
}

// daemonSetLeaving says whether the agent's own DaemonSet is gone, being
// deleted or no longer meant for this node (an uninstall here), as opposed
// to rolling (an upgrade or a restart), where the conflist entry must stay
// so new pods wait for the new agent.
func daemonSetLeaving(ctx context.Context, rc *rest.Config, namespace, pod, node string) (bool, string) {
	if namespace == "" || pod == "" {
		return false, "own pod unknown (--pod-name/--pod-namespace); keeping the entry"
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return false, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return leaving(ctx, client, namespace, pod, node)
}

// leaving is daemonSetLeaving's decision, given a client.
func leaving(ctx context.Context, client kubernetes.Interface, namespace, pod, node string) (bool, string) {
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
		if gone, why := leftNode(ctx, client, ds, node); gone {
			return true, why
		}
		return false, "DaemonSet " + ref.Name + " stays (upgrade or restart)"
	}
	return false, "own pod has no DaemonSet owner; keeping the entry"
}

// leftNode says whether ds no longer selects node (its nodeSelector or
// required node affinity changed): the DaemonSet stays but will run no
// agent here again, so keeping the entry would hold every new pod on the
// node in ContainerCreating for good. Istio's agent decides the same. When
// the node cannot be read, the entry stays (fail closed).
func leftNode(ctx context.Context, client kubernetes.Interface, ds *appsv1.DaemonSet, node string) (bool, string) {
	if node == "" {
		return false, ""
	}
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, ""
	}
	tmpl := ds.Spec.Template.Spec
	match, err := nodeaffinity.NewRequiredNodeAffinity(tmpl.NodeSelector, tmpl.Affinity).Match(n)
	if err != nil || match {
		return false, ""
	}
	return true, "DaemonSet " + ds.Name + " no longer selects node " + node
}
