package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const labelDataplane = "istio.io/dataplane-mode"

// ztunnelDaemonSet is the ztunnel stand-in (the test app's ztunnel part)
// deployed as Istio deploys ztunnel: a DaemonSet whose pods share the
// node's /var/run/ztunnel with the agent and hold the capabilities to enter
// pod network namespaces.
func ztunnelDaemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"app": "ztunnel"}
	root := int64(0)
	hostPathType := corev1.HostPathDirectoryOrCreate
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "ztunnel", Namespace: releaseNS},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
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

// A pod in a namespace labelled ambient is handed to the ztunnel stand-in,
// its outbound and inbound TCP land on it; removing the label unenrols the
// pod live, and labelling a running pod's namespace enrols it live.
func TestAmbient(t *testing.T) {
	requireAgent(t)
	cs := client(t)
	if _, err := cs.AppsV1().DaemonSets(releaseNS).Create(t.Context(), ztunnelDaemonSet(), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ztunnel DaemonSet: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.AppsV1().DaemonSets(releaseNS).Delete(context.Background(), "ztunnel", metav1.DeleteOptions{})
	})
	var zt string
	nodetest.Eventually(t, time.Minute, "ztunnel stand-in connected", func() error {
		l, err := cs.CoreV1().Pods(releaseNS).List(t.Context(), metav1.ListOptions{LabelSelector: "app=ztunnel", FieldSelector: "spec.nodeName=" + cluster.NodeName})
		if err != nil || len(l.Items) != 1 {
			return fmt.Errorf("ztunnel pods: %v", err)
		}
		zt = l.Items[0].Name
		if !strings.Contains(logs(t, releaseNS, zt, "istio-proxy"), "ztunnel connected") {
			return fmt.Errorf("%s: %s", zt, nodetest.PodState(&l.Items[0]))
		}
		return nil
	})

	ns := namespace(t, map[string]string{labelDataplane: "ambient"})
	p := createPod(t, ns, plainPod("ambient", unreachable))
	p = runningPod(t, ns, p.Name, time.Minute)
	logShows(t, releaseNS, zt, "istio-proxy", 30*time.Second, "ztunnel add "+string(p.UID), ns+"/"+p.Name)
	logShows(t, ns, p.Name, "app", 30*time.Second,
		"app dial "+unreachable+": ztunnel "+string(p.UID)+" captured on :15001 original dst "+unreachable)
	// Inbound from another pod lands on the stand-in's 15006 too.
	other := namespace(t, nil)
	c := createPod(t, other, plainPod("client", p.Status.PodIP+":8080"))
	c = runningPod(t, other, c.Name, time.Minute)
	logShows(t, other, c.Name, "app", 30*time.Second,
		"app dial "+p.Status.PodIP+":8080: ztunnel "+string(p.UID)+" captured on :15006 original dst "+p.Status.PodIP+":8080 from "+c.Status.PodIP+":")

	patch := []byte(`{"metadata":{"labels":{"` + labelDataplane + `":null}}}`)
	if _, err := cs.CoreV1().Namespaces().Patch(t.Context(), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("remove the ambient label: %v", err)
	}
	logShows(t, releaseNS, zt, "istio-proxy", 30*time.Second, "ztunnel del "+string(p.UID))
	// The running pod's dials now go out uncaptured: the address is
	// unreachable from the node.
	nodetest.Eventually(t, 30*time.Second, "the pod's outbound uncaptured", func() error {
		lines := strings.Split(strings.TrimSpace(logs(t, ns, p.Name, "app")), "\n")
		last := lines[len(lines)-1]
		// Refused would mean still captured with no listener behind it.
		if !strings.HasPrefix(last, "app dial "+unreachable+": error") || strings.Contains(last, "refused") {
			return fmt.Errorf("last dial: %q", last)
		}
		return nil
	})

	// A pod running before its namespace joins the mesh is enrolled live:
	// no ADD names its netns, so the agent finds it through the pod's
	// process, /proc/<pid>/ns/net, which the kernel opens for the agent
	// only with CAP_SYS_PTRACE (the process holds capabilities the agent
	// does not).
	early := namespace(t, nil)
	e := createPod(t, early, plainPod("early", unreachable))
	e = runningPod(t, early, e.Name, time.Minute)
	patch = []byte(`{"metadata":{"labels":{"` + labelDataplane + `":"ambient"}}}`)
	if _, err := cs.CoreV1().Namespaces().Patch(t.Context(), early, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("label a running pod's namespace ambient: %v", err)
	}
	logShows(t, releaseNS, zt, "istio-proxy", 30*time.Second, "ztunnel add "+string(e.UID))
	logShows(t, early, e.Name, "app", 30*time.Second,
		"app dial "+unreachable+": ztunnel "+string(e.UID)+" captured on :15001 original dst "+unreachable)
}
