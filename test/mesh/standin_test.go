package mesh

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// installStandIn deploys the node tests' ZDS stand-in (the test app's
// ztunnel part) where the real ztunnel was never built, so the agent has a
// ztunnel to hand ambient pods to and the istiod test still runs. It is
// deployed as Istio's chart deploys ztunnel: a DaemonSet sharing the node's
// /var/run/ztunnel with the agent.
func installStandIn(ctx context.Context) error {
	cs, err := cluster.Client()
	if err != nil {
		return err
	}
	if _, err := cs.AppsV1().DaemonSets(istioNS).Create(ctx, images.ZtunnelStandIn(istioNS, map[string]string{labelDataplane: "none"}), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the ztunnel stand-in: %w", err)
	}
	return waitFor(ctx, 2*time.Minute, "the ztunnel stand-in connected to the agent on every node", func() error {
		l, err := cs.CoreV1().Pods(istioNS).List(ctx, metav1.ListOptions{LabelSelector: "app=ztunnel"})
		if err != nil || len(l.Items) != len(cluster.Nodes()) {
			return fmt.Errorf("ztunnel pods: %d, %v", len(l.Items), err)
		}
		for _, p := range l.Items {
			b, err := cs.CoreV1().Pods(istioNS).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil || !strings.Contains(string(b), "ztunnel connected") {
				return fmt.Errorf("%s: %s (%v)", p.Name, nodetest.PodState(&p), err)
			}
		}
		return nil
	})
}
