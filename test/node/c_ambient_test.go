package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const labelDataplane = "istio.io/dataplane-mode"

// A pod in a namespace labelled ambient is handed to the ztunnel stand-in,
// its outbound and inbound TCP land on it; removing the label unenrols the
// pod live, and labelling a running pod's namespace enrols it live.
func TestAmbient(t *testing.T) {
	requireAgent(t)
	cs := client(t)
	if _, err := cs.AppsV1().DaemonSets(releaseNS).Create(t.Context(), images.ZtunnelStandIn(releaseNS, nil), metav1.CreateOptions{}); err != nil {
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
	p := cluster.CreatePod(t, ns, plainPod("ambient", unreachable))
	p = cluster.RunningPod(t, ns, p.Name, time.Minute)
	cluster.LogShows(t, releaseNS, zt, "istio-proxy", 30*time.Second, "ztunnel add "+string(p.UID), ns+"/"+p.Name)
	cluster.LogShows(t, ns, p.Name, "app", 30*time.Second,
		"app dial "+unreachable+": ztunnel "+string(p.UID)+" captured on :15001 original dst "+unreachable)
	// Inbound from another pod lands on the stand-in's 15006 too.
	other := namespace(t, nil)
	c := cluster.CreatePod(t, other, plainPod("client", p.Status.PodIP+":8080"))
	c = cluster.RunningPod(t, other, c.Name, time.Minute)
	cluster.LogShows(t, other, c.Name, "app", 30*time.Second,
		"app dial "+p.Status.PodIP+":8080: ztunnel "+string(p.UID)+" captured on :15006 original dst "+p.Status.PodIP+":8080 from "+c.Status.PodIP+":")

	patch := []byte(`{"metadata":{"labels":{"` + labelDataplane + `":null}}}`)
	if _, err := cs.CoreV1().Namespaces().Patch(t.Context(), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("remove the ambient label: %v", err)
	}
	cluster.LogShows(t, releaseNS, zt, "istio-proxy", 30*time.Second, "ztunnel del "+string(p.UID))
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
	e := cluster.CreatePod(t, early, plainPod("early", unreachable))
	e = cluster.RunningPod(t, early, e.Name, time.Minute)
	patch = []byte(`{"metadata":{"labels":{"` + labelDataplane + `":"ambient"}}}`)
	if _, err := cs.CoreV1().Namespaces().Patch(t.Context(), early, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("label a running pod's namespace ambient: %v", err)
	}
	cluster.LogShows(t, releaseNS, zt, "istio-proxy", 30*time.Second, "ztunnel add "+string(e.UID))
	cluster.LogShows(t, early, e.Name, "app", 30*time.Second,
		"app dial "+unreachable+": ztunnel "+string(e.UID)+" captured on :15001 original dst "+unreachable)
}
