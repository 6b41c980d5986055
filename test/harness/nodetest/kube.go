package nodetest

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Client is a client as the admin.
func (c *Cluster) Client() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("load admin kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	return cs, nil
}

// waitNodeReady waits for the kubelet to register the node and report it
// Ready: runtime up, its CNI config loaded.
func (c *Cluster) waitNodeReady(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	return poll(ctx, c.kubelet, "node "+c.NodeName+" Ready", func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("condition Ready=%s: %s", cond.Status, cond.Message)
			}
		}
		return fmt.Errorf("no Ready condition")
	})
}

// waitControllers waits for what tests rely on the controller manager for:
// the default ServiceAccount and the root CA ConfigMap pods mount, and the
// API server's endpoints the in-cluster Service leads to.
func (c *Cluster) waitControllers(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	return poll(ctx, c.control[1], "default ServiceAccount and kube-root-ca.crt", func() error {
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		return err
	})
}
