package mesh

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	appsv1 "k8s.io/api/apps/v1"
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
	if _, err := cs.AppsV1().DaemonSets(istioNS).Create(ctx, standInDaemonSet(), metav1.CreateOptions{}); err != nil {
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

func standInDaemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"app": "ztunnel", labelDataplane: "none"}
	root := int64(0)
	hostPathType := corev1.HostPathDirectoryOrCreate
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "ztunnel", Namespace: istioNS},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ztunnel"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "istio-proxy", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
						Command: []string{"/testapp", "ztunnel", "/var/run/ztunnel/ztunnel.sock"},
						SecurityContext: &corev1.SecurityContext{
							RunAsUser:    &root,
							Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "SYS_ADMIN", "NET_RAW"}},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "cni-ztunnel-sock-dir", MountPath: "/var/run/ztunnel"}},
					}},
					Volumes: []corev1.Volume{{Name: "cni-ztunnel-sock-dir", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: "/var/run/ztunnel", Type: &hostPathType},
					}}},
				},
			},
		},
	}
}
