package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
)

const (
	kubeNode  = "node-e2e"
	agentUser = "sluice-agent"
	agentNS   = "sluice-system"
)

// The test kube-apiserver starts on the first test that needs it and is
// stopped after the package's tests (TestMain).
var sharedAPI = &kubetest.Shared{User: agentUser, RBACFile: "../../deploy/rbac/clusterrole.yaml"}

func sharedKube(t *testing.T) (*kubetest.Env, kubernetes.Interface) {
	t.Helper()
	nstest.RequireRoot(t)
	env := sharedAPI.Get(t)
	return env, kubernetes.NewForConfigOrDie(env.AdminConfig())
}

// kubeAgent starts the agent against the API server as the agent's own
// identity (the shipped ClusterRole, not admin). It runs in the machine's
// netns to reach the API server on loopback, on a free health port; it
// still programs only the test's pod netns.
func (n *node) kubeAgent(env *kubetest.Env, extra ...string) *agent {
	n.agentInHostNetns = true
	return n.startAgent(append([]string{"--kubeconfig", env.Kubeconfig(n.t, agentUser), "--node-name", kubeNode,
		"--health-addr", "127.0.0.1:0"}, extra...)...)
}

func createNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	_, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// sidecarPod is a pod on the test's node as Istio's injector leaves it.
func sidecarPod(name string, ann map[string]string) *corev1.Pod {
	return podtest.SidecarPod(kubeNode, name, ann)
}

// rtFor is the runtime's view of a pod: CNI_ARGS carry its real identity.
func rtFor(containerID string, netns *nstest.NS, p *corev1.Pod) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: containerID, NetNS: netns.Path, IfName: "eth0", Args: [][2]string{
		{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.Namespace}, {"K8S_POD_NAME", p.Name}, {"K8S_POD_UID", string(p.UID)},
	}}
}

// Pod metadata decides capture, through the real plugin and agent, with the
// agent holding only the shipped RBAC permissions.
func TestKubePolicyDecidesCapture(t *testing.T) {
	env, c := sharedKube(t)
	createNamespace(t, c, "shop")
	n := newNode(t)
	n.kubeAgent(env)
	cni := n.cni(n.loopbackChain("5s"))

	injected := podtest.Create(t, c, "shop", sidecarPod("cart", map[string]string{
		"traffic.sidecar.istio.io/excludeOutboundPorts": "5432",
	}))
	plain := podtest.Create(t, c, "shop", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain"},
		Spec: corev1.PodSpec{NodeName: kubeNode, Containers: []corev1.Container{{Name: "app", Image: "app"}}}})
	hostNet := sidecarPod("hostnet", nil)
	hostNet.Spec.HostNetwork = true
	hostNet = podtest.Create(t, c, "shop", hostNet)
	bad := podtest.Create(t, c, "shop", sidecarPod("bad", map[string]string{
		"traffic.sidecar.istio.io/excludeOutboundIPRanges": "10.0.0.0/33",
	}))

	nsCart := n.Pod("cart")
	if _, err := cni.Add(rtFor("cart1", nsCart, injected)); err != nil {
		t.Fatalf("ADD injected pod: %v", err)
	}
	n.expectInSync(t, "cart1")
	if out := nsCart.Run(t, "nft", "list", "table", "inet", "sluice"); !strings.Contains(out, "5432") {
		t.Errorf("excludeOutboundPorts annotation not in the ruleset:\n%s", out)
	}
	for _, p := range []*corev1.Pod{plain, hostNet} {
		netns := n.Pod(p.Name)
		if _, err := cni.Add(rtFor(p.Name+"1", netns, p)); err != nil {
			t.Fatalf("ADD %s: %v", p.Name, err)
		}
		if s := rulesetState(t, netns); s != "none" {
			t.Errorf("%s was captured: %s", p.Name, s)
		}
	}
	nsBad := n.Pod("bad")
	_, err := cni.Add(rtFor("bad1", nsBad, bad))
	if err == nil {
		t.Fatal("ADD with an invalid annotation succeeded")
	}
	for _, want := range []string{"shop/bad", "excludeOutboundIPRanges", "10.0.0.0/33"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ADD error %q does not name %q", err, want)
		}
	}
	if s := rulesetState(t, nsBad); s != "none" {
		t.Errorf("a pod with an invalid annotation got rules: %s", s)
	}

	explain, err := sluicev1.NewDebugClient(n.Client()).Explain(t.Context(), &sluicev1.ExplainRequest{
		Pod: &sluicev1.PodRef{Namespace: "shop", Name: "cart", Uid: string(injected.UID)}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := sluicev1.NewDebugClient(n.Client()).GetWorkload(t.Context(), &sluicev1.GetWorkloadRequest{ContainerId: "cart1"})
	if err != nil {
		t.Fatal(err)
	}
	if explain.Ruleset != got.Ruleset || !strings.Contains(strings.Join(explain.Inputs, "\n"), "excludeOutboundPorts") {
		t.Errorf("Explain does not match what ADD programmed:\nexplain inputs %v\n%s\nadd:\n%s", explain.Inputs, explain.Ruleset, got.Ruleset)
	}
}

// The API server goes away: a pod the agent has never seen fails its ADD
// with a clear error; once the server is back the agent recovers.
func TestKubeAPIServerOutage(t *testing.T) {
	env, c := sharedKube(t)
	createNamespace(t, c, "outage")
	n := newNode(t)
	n.kubeAgent(env)
	cni := n.cni(n.loopbackChain("10s"))

	env.StopAPIServer()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			env.StartAPIServer()
		}
	})
	netns := n.Pod("late")
	ghost := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "outage", Name: "late", UID: "0000-late"}}
	_, err := cni.Add(rtFor("late1", netns, ghost))
	if err == nil || !strings.Contains(err.Error(), "API server") {
		t.Fatalf("ADD during the outage = %v, want an error naming the API server", err)
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	pod := podtest.Create(t, c, "outage", sidecarPod("late", nil))
	nstest.Eventually(t, 30*time.Second, func() bool {
		_, err := cni.Add(rtFor("late1", netns, pod))
		return err == nil
	}, "agent did not recover after the API server returned")
	n.expectInSync(t, "late1")
}

// On SIGTERM the agent keeps its conflist entry while its DaemonSet stays
// (an upgrade: new pods wait for the new agent), and removes it when the
// DaemonSet is deleted (an uninstall).
func TestKubeUninstallOnlyWhenDaemonSetGoes(t *testing.T) {
	env, c := sharedKube(t)
	createNamespace(t, c, agentNS)
	ds, err := c.AppsV1().DaemonSets(agentNS).Create(context.Background(), &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "sluice-agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sluice-agent"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "sluice-agent"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "sluice"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	self := podtest.Create(t, c, agentNS, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sluice-agent-x1", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID},
		}},
		Spec: corev1.PodSpec{NodeName: kubeNode, HostNetwork: true, Containers: []corev1.Container{{Name: "agent", Image: "sluice"}}},
	})

	n := newNode(t)
	primaryPath := filepath.Join(n.ConfDir, "10-bridge.conflist")
	if err := os.WriteFile(primaryPath, n.bridgeOnly(), 0o644); err != nil {
		t.Fatal(err)
	}
	hasEntry := func() bool {
		b, _ := os.ReadFile(n.ownedConflist(filepath.Base(primaryPath)))
		return strings.Contains(string(b), `"sluice"`)
	}
	args := []string{"--install=true", "--pod-name", self.Name, "--pod-namespace", agentNS}

	n.kubeAgent(env, args...).Stop(t)
	if !hasEntry() {
		t.Fatal("entry removed on exit while the DaemonSet stays")
	}
	if err := c.AppsV1().DaemonSets(agentNS).Delete(context.Background(), ds.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.kubeAgent(env, args...).Stop(t)
	if hasEntry() {
		t.Fatal("entry kept on exit after the DaemonSet was deleted")
	}
}

// expectInSync checks that the agent enrolled the container and the kernel
// holds exactly the ruleset its policy chose.
func (n *node) expectInSync(t *testing.T, containerID string) {
	t.Helper()
	w, err := sluicev1.NewDebugClient(n.Client()).GetWorkload(t.Context(), &sluicev1.GetWorkloadRequest{ContainerId: containerID})
	if err != nil {
		t.Fatalf("GetWorkload %s: %v", containerID, err)
	}
	if len(w.Drift) != 0 {
		t.Fatalf("%s drifted: %v", containerID, w.Drift)
	}
}
