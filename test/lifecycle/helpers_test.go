package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/internal/nodetest"
)

// The release the tests install, in the namespace Istio's CNI agent uses.
const (
	release        = "sluice"
	releaseNS      = "kube-system"
	agentApp       = "sluice-agent" // the DaemonSet pods' app label
	labelDataplane = "istio.io/dataplane-mode"
)

func client(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// namespace creates a namespace with labels and deletes it when the test
// ends.
func namespace(t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	cs := client(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	nodetest.Eventually(t, 30*time.Second, "default ServiceAccount in "+name, func() error {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(t.Context(), "default", metav1.GetOptions{})
		return err
	})
	return name
}

// helm runs the cached helm binary against the cluster.
func helm(t testing.TB, args ...string) {
	t.Helper()
	root, err := nodetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := exec.Command(filepath.Join(root, "hack", "helm", "helm.sh"), "--path").Output()
	if err != nil {
		t.Fatalf("helm.sh --path: %v", err)
	}
	home := filepath.Join(cluster.Dir, "helm-home")
	cmd := exec.Command(strings.TrimSpace(string(bin)), args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.Kubeconfig(),
		"HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// chartArgs are `helm install|upgrade` arguments for the image built with
// tag, never pulled, ambient on. Repair is off: its late enrolment of pods
// found running uncaptured races the app's start and would hide a pod
// whose ADD let it start before its rules were in; these tests hold the
// ADD path alone to the rule.
func chartArgs(verb, tag string) []string {
	return []string{verb, release, "deploy/helm/sluice", "-n", releaseNS,
		"--set", "image.repository=" + images.SluiceRepo,
		"--set", "image.tag=" + tag,
		"--set", "image.pullPolicy=Never",
		"--set", "ambient.enabled=true",
		"--set", "repair.enabled=false",
	}
}

var installed bool

// requireMesh installs the chart at tagA and the ztunnel stand-in once,
// and waits for both.
func requireMesh(t *testing.T) {
	t.Helper()
	if !installed {
		helm(t, chartArgs("install", tagA)...)
		if _, err := client(t).AppsV1().DaemonSets(releaseNS).Create(t.Context(), ztunnelDaemonSet(), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ztunnel DaemonSet: %v", err)
		}
		installed = true
	}
	readyAgent(t, tagA, 2*time.Minute)
	nodetest.Eventually(t, time.Minute, "ztunnel stand-in connected", func() error {
		l, err := client(t).CoreV1().Pods(releaseNS).List(t.Context(), metav1.ListOptions{LabelSelector: "app=ztunnel"})
		if err != nil || len(l.Items) != 1 {
			return fmt.Errorf("ztunnel pods: %v", err)
		}
		if !strings.Contains(logs(t, releaseNS, l.Items[0].Name, "istio-proxy"), "ztunnel connected") {
			return fmt.Errorf("%s: %s", l.Items[0].Name, nodetest.PodState(&l.Items[0]))
		}
		return nil
	})
}

// readyAgent waits for exactly one agent pod, not being deleted, running
// the image with tag and Ready, and returns its container's ID.
func readyAgent(t testing.TB, tag string, timeout time.Duration) string {
	t.Helper()
	return readyAgentNot(t, tag, "", timeout)
}

// readyAgentNot is readyAgent for an agent container other than notID.
func readyAgentNot(t testing.TB, tag, notID string, timeout time.Duration) string {
	t.Helper()
	want := images.SluiceRepo + ":" + tag
	var id string
	nodetest.Eventually(t, timeout, "one Ready agent pod of "+want, func() error {
		l, err := client(t).CoreV1().Pods(releaseNS).List(t.Context(), metav1.ListOptions{LabelSelector: "app=" + agentApp})
		if err != nil {
			return err
		}
		var found []corev1.Pod
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				found = append(found, p)
			}
		}
		if len(found) != 1 {
			return fmt.Errorf("%d agent pods", len(found))
		}
		p := &found[0]
		if got := p.Spec.Containers[0].Image; got != want {
			return fmt.Errorf("agent %s runs %s", p.Name, got)
		}
		if !nodetest.PodReady(p) || len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("%s not Ready: %s", p.Name, nodetest.PodState(p))
		}
		if id = p.Status.ContainerStatuses[0].ContainerID; id == notID {
			return fmt.Errorf("%s: container %s not yet replaced", p.Name, id)
		}
		return nil
	})
	return id
}

// allRunning says whether every container of the pod runs.
func allRunning(p *corev1.Pod) bool {
	if p.Status.PodIP == "" || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// logs is a container's log as `kubectl logs` reads it.
func logs(t testing.TB, ns, pod, container string) string {
	b, err := client(t).CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	if err != nil {
		return "(logs: " + err.Error() + ")"
	}
	return string(b)
}

// percentile is the p-th percentile (0..100, nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// ztunnelDaemonSet is the test app's ztunnel stand-in, deployed as Istio
// deploys ztunnel (see test/node's TestAmbient).
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
