package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluicemesh/sluice/daemon/nodetaint"
)

// nodeNameExtra is where the API server puts the node a pod-bound
// service-account token was issued on.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// The agent's own token (read where the kubelet mounted it) is bound to
// its node, and with it the agent may remove the startup taint from that
// node and do nothing else to any node: RBAC grants patch on every node,
// the chart's ValidatingAdmissionPolicy refuses the rest. Each refusal is
// checked for the rule that makes it, on a node where no other rule would;
// the same for its nodes/status grant and the node-condition policy.
func TestAgentMayOnlyUntaintItsOwnNode(t *testing.T) {
	requireAgent(t)
	agent := readyAgent(t, time.Minute)
	as := agentClient(t, agent)
	review, err := as.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview with the agent's token: %v", err)
	}
	if got := review.Status.UserInfo.Extra[nodeNameExtra]; !slices.Equal(got, authenticationv1.ExtraValue{cluster.NodeName}) {
		t.Fatalf("the agent's token names node %v (user %s), want [%s]", got, review.Status.UserInfo.Username, cluster.NodeName)
	}

	other := otherNode(t)
	const (
		notOwn    = "only the node its service-account token is bound to"
		onlyTaint = "may only remove the startup taint"
		nothing   = "may change nothing of a node but its startup taint"
	)
	for _, tc := range []struct {
		what, node, patch, want string
	}{
		{"remove the startup taint from another node", other, `{"spec":{"taints":[]}}`, notOwn},
		{"label its own node", cluster.NodeName, `{"metadata":{"labels":{"sluice.test/by-agent":"x"}}}`, nothing},
		{"cordon its own node", cluster.NodeName, `{"spec":{"unschedulable":true}}`, nothing},
		{"add a taint to its own node", cluster.NodeName,
			`{"spec":{"taints":[{"key":"sluice.test/by-agent","effect":"NoSchedule"}]}}`, onlyTaint},
	} {
		_, err := as.CoreV1().Nodes().Patch(t.Context(), tc.node, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("the agent may %s: %v, want the policy to refuse it (%q)", tc.what, err, tc.want)
		}
	}
	// Through nodes/status (the chart's nodeCondition) it may keep its one
	// condition on its own node and nothing else: never another node's,
	// never the kubelet's Ready. Dry runs: a hole must not make the node
	// NotReady for real.
	const (
		notOwnStatus  = "only the status of the node its service-account token is bound to"
		onlyCondition = "may change no node condition but " + meshReady
		nothingStatus = "may change nothing of a node but its node condition"
	)
	for _, tc := range []struct {
		what, node, patch, want string
	}{
		{"set " + meshReady + " on another node", other, `{"status":{"conditions":[{"type":"` + meshReady + `","status":"True","reason":"X"}]}}`, notOwnStatus},
		{"make its own node NotReady", cluster.NodeName, `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"X"}]}}`, onlyCondition},
		{"label its own node through its status", cluster.NodeName, `{"metadata":{"labels":{"sluice.test/by-agent":"x"}}}`, nothingStatus},
	} {
		_, err := as.CoreV1().Nodes().Patch(t.Context(), tc.node, types.StrategicMergePatchType, []byte(tc.patch),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("the agent may %s: %v, want the policy to refuse it (%q)", tc.what, err, tc.want)
		}
	}
	own := `{"status":{"conditions":[{"type":"` + meshReady + `","status":"True","reason":"MeshReady"}]}}`
	if _, err := as.CoreV1().Nodes().Patch(t.Context(), cluster.NodeName, types.StrategicMergePatchType, []byte(own),
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status"); err != nil {
		t.Errorf("the agent keeping %s on its own node: %v", meshReady, err)
	}
	// What it is for passes: the startup taint off its own node, the
	// other taints kept.
	setTaints(t, cluster.NodeName, append(nodeTaints(t, cluster.NodeName), startupTaint()))
	t.Cleanup(func() {
		if nodeTainted(t) {
			setTaints(t, cluster.NodeName, nodetaint.Without(nodeTaints(t, cluster.NodeName), nodetaint.DefaultKey))
		}
	})
	kept := nodetaint.Without(nodeTaints(t, cluster.NodeName), nodetaint.DefaultKey)
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": kept}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.CoreV1().Nodes().Patch(t.Context(), cluster.NodeName, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		t.Fatalf("the agent removing the startup taint from its own node: %v", err)
	}
	if nodeTainted(t) {
		t.Errorf("node %s still carries the startup taint", cluster.NodeName)
	}
}

func startupTaint() corev1.Taint {
	return corev1.Taint{Key: nodetaint.DefaultKey, Effect: corev1.TaintEffectNoSchedule}
}

// agentClient is a client with the agent pod's own service-account token,
// read from the projected volume the kubelet wrote on the node.
func agentClient(t *testing.T, agent corev1.Pod) *kubernetes.Clientset {
	t.Helper()
	glob := cluster.NodePath("/var/lib/kubelet/pods/" + string(agent.UID) + "/volumes/kubernetes.io~projected/*/token")
	files, _ := filepath.Glob(glob)
	if len(files) != 1 {
		t.Fatalf("the agent's token: %d files match %s", len(files), glob)
	}
	token, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cluster.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.BearerToken, cfg.BearerTokenFile = strings.TrimSpace(string(token)), ""
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// otherNode is a Node object with no kubelet behind it and the startup
// taint, deleted when the test ends. It lacks kubernetes.io/os, so no
// DaemonSet of the chart's selects it.
func otherNode(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("other-%d", seq.Add(1))
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{startupTaint()}}}
	if _, err := client(t).CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = client(t).CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

func nodeTaints(t *testing.T, name string) []corev1.Taint {
	t.Helper()
	n, err := client(t).CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", name, err)
	}
	return n.Spec.Taints
}

// setTaints sets a node's taints as the admin.
func setTaints(t *testing.T, name string, taints []corev1.Taint) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": taints}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client(t).CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		t.Fatalf("set taints of node %s: %v", name, err)
	}
}
