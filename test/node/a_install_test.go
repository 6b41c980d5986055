package node

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/daemon/nodetaint"
	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// installed is set once the chart is in; later tests that need the agent
// install it themselves when run alone (-run).
var installed bool

// requireAgent installs the chart if no test has yet and waits for its
// agent to be Ready.
func requireAgent(t *testing.T) {
	t.Helper()
	if !installed {
		helm(t, append([]string{"install", release, "deploy/helm/sluice", "-n", releaseNS}, chartValues()...)...)
		installed = true
	}
	readyAgent(t, 2*time.Minute)
}

// The node registered with the startup taint, so a pod created before any
// agent stays Pending, unschedulable; the node's own agent removes the
// taint once it is ready, and only then is the pod scheduled, and it starts
// captured. Runs first (file order): it needs a node no agent has seen.
func TestStartupTaint(t *testing.T) {
	if installed {
		t.Fatal("the chart is installed already; this test needs the node as it registered")
	}
	if !nodeTainted(t) {
		t.Fatalf("node %s registered without the startup taint %s", cluster.NodeName, nodetaint.DefaultKey)
	}
	ns := namespace(t, nil)
	p := cluster.CreatePod(t, ns, sidecarPod("before-agent", unreachable, nil))
	nodetest.Eventually(t, 30*time.Second, "the pod unschedulable for the startup taint", func() error {
		c := podCondition(cluster.GetPod(t, ns, p.Name), corev1.PodScheduled)
		if c == nil || c.Reason != corev1.PodReasonUnschedulable || !strings.Contains(c.Message, "untolerated taint") {
			return fmt.Errorf("PodScheduled condition %+v", c)
		}
		return nil
	})
	requireAgent(t)
	agent := readyAgent(t, time.Minute)
	// Past the taint remover's backoff (it doubles to 30 s while the
	// admission policy it proves in force is still syncing): the wait is on
	// the event, not on the remover's timer.
	nodetest.Eventually(t, 3*time.Minute, "the startup taint removed", func() error {
		if nodeTainted(t) {
			return fmt.Errorf("node %s still tainted", cluster.NodeName)
		}
		return nil
	})
	cluster.RunningPod(t, ns, p.Name, time.Minute)
	cluster.LogShows(t, ns, p.Name, "app", 30*time.Second,
		"app dial "+unreachable+": proxy captured on :15001 original dst "+unreachable)
	cluster.LogShows(t, releaseNS, agent.Name, "sluice-agent", 10*time.Second, "removed the node's startup taint", cluster.NodeName)
}

// nodeTainted says whether the node carries the startup taint.
func nodeTainted(t testing.TB) bool {
	t.Helper()
	n, err := client(t).CoreV1().Nodes().Get(context.Background(), cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	return len(nodetaint.Without(n.Spec.Taints, nodetaint.DefaultKey)) != len(n.Spec.Taints)
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i, c := range p.Status.Conditions {
		if c.Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// The chart's DaemonSet pod becomes Ready through its own probes, the
// installer has chained sluice last in the conflist the runtime uses and
// put the plugin in the node's bin dir, and the agent's log is readable
// as `kubectl logs` reads it.
func TestHelmInstall(t *testing.T) {
	requireAgent(t)
	agent := readyAgent(t, time.Minute)
	if agent.Spec.NodeName != cluster.NodeName {
		t.Errorf("agent pod on node %q, want %q", agent.Spec.NodeName, cluster.NodeName)
	}
	if types := cluster.RuntimeConflistTypes(t); len(types) < 2 || types[len(types)-1] != "sluice" || types[0] != "bridge" {
		t.Errorf("node conflist plugins = %v, want bridge first and sluice last", types)
	}
	if st, err := os.Stat(cluster.NodePath("/opt/cni/bin/sluice")); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("plugin in the node's /opt/cni/bin: %v (mode %v)", err, st)
	}
	nodetest.Eventually(t, 30*time.Second, "the agent's log", func() error {
		l := logs(t, releaseNS, agent.Name, "sluice-agent")
		if !strings.Contains(l, "msg=serving") || !strings.Contains(l, "version="+imageTag) {
			return fmt.Errorf("agent log has no serving line of version %s:\n%s", imageTag, l)
		}
		return nil
	})
}
