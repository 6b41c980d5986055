package nri_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
)

const (
	kubeNode  = "node-nri"
	agentUser = "sluice-agent"
)

// The same pods, as Istio's injector leaves them, are decided alike by the
// two triggers of one agent running the Kubernetes policy: a CNI ADD over
// the agent's socket and containerd's RunPodSandbox over NRI. An injected
// pod gets the same ruleset (same hash), a plain pod is passed through by
// both with the same reason, a pod with an invalid annotation is refused by
// both.
func TestNRIAndCNIDecideAlike(t *testing.T) {
	nstest.RequireRoot(t)
	env := sharedAPI.Get(t)
	kc := kubernetes.NewForConfigOrDie(env.AdminConfig())
	n := newNode(t)
	c := n.startContainerd(containerdOptions{})
	n.agentInHostNetns = true
	a := n.startAgent("--trigger", "both", "--install=false", "--kubeconfig", env.Kubeconfig(t, agentUser), "--node-name", kubeNode)
	mesh := "mesh-" + strings.TrimPrefix(filepath.Base(n.Dir), "sluice-agentnode-")
	if _, err := kc.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mesh}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kc.CoreV1().Namespaces().Delete(context.Background(), mesh, metav1.DeleteOptions{}) })

	injected := podtest.Create(t, kc, mesh, sidecarPod("cart", map[string]string{
		"traffic.sidecar.istio.io/excludeOutboundPorts":    "5432",
		"traffic.sidecar.istio.io/includeOutboundIPRanges": "10.96.0.0/12",
	}))
	plain := podtest.Create(t, kc, mesh, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain"},
		Spec: corev1.PodSpec{NodeName: kubeNode, Containers: []corev1.Container{{Name: "app", Image: "app"}}}})
	bad := podtest.Create(t, kc, mesh, sidecarPod("bad", map[string]string{
		"traffic.sidecar.istio.io/excludeOutboundIPRanges": "10.0.0.0/33",
	}))

	// Injected: both enrol, with the same ruleset.
	viaCNI := n.cniAddFor(t, "cni-cart", injected)
	if !viaCNI.Enrolled {
		t.Fatalf("CNI ADD passed the injected pod through: %s", viaCNI.Reason)
	}
	s := c.runKubePod(injected)
	cniW, nriW := n.enrolled("cni-cart"), n.enrolled(s.ID)
	if cniW == nil || nriW == nil {
		t.Fatalf("injected pod: CNI record %v, NRI record %v; want both", cniW, nriW)
	}
	if cniW.RulesetHash != nriW.RulesetHash || cniW.Mode != nriW.Mode {
		t.Fatalf("the triggers decided differently: CNI %s %s, NRI %s %s", cniW.Mode, cniW.RulesetHash, nriW.Mode, nriW.RulesetHash)
	}
	expectCaptured(t, n.netns(s))

	// Plain: both pass it through, for the same reason.
	viaCNI = n.cniAddFor(t, "cni-plain", plain)
	if viaCNI.Enrolled {
		t.Fatal("CNI ADD enrolled a pod with no sidecar")
	}
	s = c.runKubePod(plain)
	if n.enrolled(s.ID) != nil {
		t.Fatal("NRI enrolled a pod with no sidecar")
	}
	if a.Logs.Count("msg=\"passed through\"", "event=RunPodSandbox", "pod="+mesh+"/plain", viaCNI.Reason) != 1 {
		t.Fatalf("NRI did not pass the plain pod through for the CNI's reason %q:\n%s", viaCNI.Reason, a.Logs)
	}

	// Invalid annotation: both refuse.
	if _, err := n.cniAddPod("cni-bad", n.holdNetns(), podRef(bad)); err == nil {
		t.Fatal("CNI ADD accepted a pod with an invalid annotation")
	}
	if out, err := c.Crictl(t.Context(), "runp", c.kubePodConfig(bad)); err == nil {
		t.Fatalf("runp of a pod with an invalid annotation succeeded: %s", out)
	} else if !strings.Contains(err.Error(), "10.0.0.0/33") {
		t.Fatalf("runp failed without the policy's reason: %v", err)
	}
}

func (n *node) cniAddFor(t *testing.T, containerID string, p *corev1.Pod) *sluicev1.AddResponse {
	t.Helper()
	// An IPv4 address, as the bridge gives the NRI sandboxes: policy picks
	// the families to capture from the pod's addresses (Istio's rule), so
	// the two triggers see the same pod only when both carry them.
	resp, err := n.cniAddPod(containerID, n.holdNetns(), podRef(p), "10.250.0.9/24")
	if err != nil {
		t.Fatalf("CNI ADD for %s/%s: %v", p.Namespace, p.Name, err)
	}
	return resp
}

func podRef(p *corev1.Pod) *sluicev1.PodRef {
	return &sluicev1.PodRef{Namespace: p.Namespace, Name: p.Name, Uid: string(p.UID)}
}

// kubePodConfig is the crictl pod config the kubelet would send for p.
func (c *containerd) kubePodConfig(p *corev1.Pod) string {
	conf := fmt.Sprintf(`{
  "metadata": {"name": %q, "namespace": %q, "uid": %q, "attempt": 0},
  "hostname": %q,
  "linux": {"cgroup_parent": %q, "security_context": {"namespace_options": {"network": 0}}}
}`, p.Name, p.Namespace, p.UID, p.Name, c.n.Cgroup)
	path := filepath.Join(c.n.Dir, "kube-"+p.Name+".json")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		c.n.t.Fatal(err)
	}
	return path
}

func (c *containerd) runKubePod(p *corev1.Pod) sandbox {
	c.n.t.Helper()
	return c.Inspect(c.MustCrictl("runp", c.kubePodConfig(p)))
}

// sidecarPod is a pod on the test's node as Istio's injector leaves it.
func sidecarPod(name string, ann map[string]string) *corev1.Pod {
	return podtest.SidecarPod(kubeNode, name, ann)
}

// A pod the policy cannot decide in time (the API server does not know
// it: the lookup waits for the watch, then asks) fails runp within the
// agent's budget, before containerd's request timeout would have let it
// start uncaptured and dropped the plugin: the plugin stays connected and
// the next pod is captured.
func TestNRIUndecidablePodFailsClosedInBudget(t *testing.T) {
	nstest.RequireRoot(t)
	env := sharedAPI.Get(t)
	kc := kubernetes.NewForConfigOrDie(env.AdminConfig())
	n := newNode(t)
	c := n.startContainerd(containerdOptions{})
	n.agentInHostNetns = true
	a := n.startAgent("--kubeconfig", env.Kubeconfig(t, agentUser), "--node-name", kubeNode)
	mesh := "late-" + strings.TrimPrefix(filepath.Base(n.Dir), "sluice-agentnode-")
	if _, err := kc.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mesh}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kc.CoreV1().Namespaces().Delete(context.Background(), mesh, metav1.DeleteOptions{}) })

	ghost := sidecarPod("ghost", nil)
	ghost.Namespace, ghost.UID = mesh, "uid-not-in-the-api"
	start := time.Now()
	out, err := c.Crictl(t.Context(), "runp", c.kubePodConfig(ghost))
	took := time.Since(start)
	if err == nil {
		t.Fatalf("runp of a pod the API server does not know succeeded: %s", out)
	}
	if !strings.Contains(err.Error(), "sluice: capture pod "+mesh+"/ghost") {
		t.Fatalf("runp failed without the agent's reason: %v", err)
	}
	t.Logf("runp failed after %v", took)
	if strings.Contains(c.Logs.String(), "closing plugin 10-sluice") {
		t.Fatalf("containerd dropped the plugin:\n%s", c.Logs)
	}
	if got := a.Logs.Count("synchronized with the runtime"); got != 1 {
		t.Fatalf("the plugin reconnected (%d connections): the event overran the runtime's timeout", got)
	}
	pod := podtest.Create(t, kc, mesh, sidecarPod("known", map[string]string{
		"traffic.sidecar.istio.io/includeOutboundIPRanges": "10.96.0.0/12",
	}))
	s := c.runKubePod(pod)
	if n.enrolled(s.ID) == nil {
		t.Fatal("the next pod was not enrolled")
	}
	expectCaptured(t, n.netns(s))
}
