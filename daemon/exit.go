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
	leaving, why := daemonSetLeaving(context.Background(), rc, cfg.podNamespace, cfg.podName)
	log.Info("conflist entry on exit", "remove", leaving, "why", why)
	return leaving
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
