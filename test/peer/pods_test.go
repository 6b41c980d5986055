package peer

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Istio metadata istiod's injector writes in CNI mode, and a
// destination nothing on the node routes (nodetest's).
const (
	annStatus   = nodetest.AnnSidecarStatus
	statusVal   = nodetest.SidecarStatus
	proxyUID    = nodetest.ProxyUID
	unreachable = nodetest.Unreachable
)

// plainPod is an uninjected application pod (nodetest's PlainPod).
func plainPod(name, dial string) *corev1.Pod { return images.PlainPod(name, dial) }

// validationArgs are the istio-validation init container's arguments as
// Istio's injection template writes them in CNI mode, with its defaults:
// pilot-agent checks that a connection is redirected, and fails the pod
// (exit 126) if not, without applying any rule.
var validationArgs = []string{"istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337", "-m", "REDIRECT",
	"-i", "*", "-x", "", "-b", "*", "-d", "15090,15021,15020", "--log_output_level=default:info",
	"--run-validation", "--skip-rule-apply"}

// sidecarPod is nodetest's SidecarPod with the real istio-validation init
// container (pilot-agent from the proxyv2 stand-in).
func sidecarPod(name, dial string) *corev1.Pod {
	p := images.SidecarPod(name, dial)
	v := &p.Spec.InitContainers[0]
	v.Image, v.Command, v.Args = validationImage, nil, validationArgs
	return p
}

// createPod creates p on the node under test, as test/node's does: the
// second node is there to stay Ready, and the rule and container helpers
// read the first node's runtime.
func createPod(t testing.TB, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: cluster.NodeName}
	}
	got, err := client(t).CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, p.Name, err)
	}
	return got
}

func getPod(t testing.TB, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := client(t).CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return p
}

// deletePod deletes a pod at once, for cleanups.
func deletePod(ns, name string) {
	cs, err := cluster.Client()
	if err != nil {
		return
	}
	zero := int64(0)
	_ = cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// runningPod waits until every container of the pod runs and returns it.
func runningPod(t testing.TB, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	nodetest.Eventually(t, timeout, "pod "+ns+"/"+name+" Running", func() error {
		p = getPod(t, ns, name)
		if p.Status.PodIP == "" {
			return fmt.Errorf("%s, no pod IP", nodetest.PodState(p))
		}
		return isRunning(p)
	})
	return p
}

// isRunning is nil once every container of the pod runs.
func isRunning(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("%s", nodetest.PodState(p))
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return fmt.Errorf("%s", nodetest.PodState(p))
		}
	}
	return nil
}

// logShows waits until the container's log has a line containing every
// one of parts.
func logShows(t testing.TB, ns, pod, container string, timeout time.Duration, parts ...string) {
	t.Helper()
	nodetest.Eventually(t, timeout, fmt.Sprintf("%s/%s[%s] to log %q", ns, pod, container, parts), func() error {
		l := logs(t, ns, pod, container)
		for _, line := range strings.Split(l, "\n") {
			if containsAll(line, parts) {
				return nil
			}
		}
		return fmt.Errorf("log:\n%s", l)
	})
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// podRules is what iptables (nf_tables backend, as istio-cni's plugin
// picks on a node whose iptables is nft) and legacy iptables list in the
// nat table of the pod's netns, read through its app container's task.
func podRules(t testing.TB, p *corev1.Pod) string {
	t.Helper()
	var id string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "app" {
			id = cs.ContainerID
		}
	}
	if id == "" {
		t.Fatalf("pod %s/%s has no app container ID: %s", p.Namespace, p.Name, nodetest.PodState(p))
	}
	netns, err := cluster.ContainerNetns(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, save := range []string{"iptables-nft-save", "iptables-legacy-save"} {
		out, err := exec.Command("nsenter", "--net="+netns, save, "-t", "nat").CombinedOutput()
		if err != nil {
			t.Fatalf("%s in %s/%s's netns: %v\n%s", save, p.Namespace, p.Name, err, out)
		}
		fmt.Fprintf(&all, "# %s\n%s", save, out)
	}
	return all.String()
}

// captured is nil if the pod's netns holds Istio's sidecar redirection:
// outbound to 15001, inbound to 15006, the proxy's UID let out.
func captured(rules string) error {
	for _, want := range []string{"-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
		"-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006",
		"--uid-owner 1337 -j RETURN"} {
		if !strings.Contains(rules, want) {
			return fmt.Errorf("no %q in the pod's nat table:\n%s", want, rules)
		}
	}
	return nil
}
