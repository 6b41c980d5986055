package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod with the injector's metadata starts through the CNI chain with its
// TCP captured both ways onto the stand-in proxy; an uninjected pod next to
// it is not captured; deleting the injected pod runs DEL, which removes its
// record.
func TestSidecar(t *testing.T) {
	requireAgent(t)
	ns := namespace(t, nil)

	// Its app dials an address nothing routes: only capture answers.
	s := cluster.CreatePod(t, ns, sidecarPod("injected", unreachable, nil))
	s = cluster.RunningPod(t, ns, s.Name, time.Minute)
	sIP := s.Status.PodIP

	cluster.LogShows(t, ns, s.Name, "app", 30*time.Second,
		"app dial "+unreachable+": proxy captured on :15001 original dst "+unreachable)
	nodetest.Eventually(t, 30*time.Second, "inbound capture of "+sIP+":8080", func() error {
		line, err := dialLine(sIP + ":8080")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "proxy captured on :15006 original dst "+sIP+":8080") {
			return fmt.Errorf("node → %s:8080 answered %q", sIP, line)
		}
		return nil
	})

	// The uninjected pod answers itself, and its outbound reaches the
	// injected pod directly (seen there as inbound from its own IP).
	u := cluster.CreatePod(t, ns, plainPod("plain", sIP+":8080"))
	u = cluster.RunningPod(t, ns, u.Name, time.Minute)
	if line, err := dialLine(u.Status.PodIP + ":8080"); err != nil || line != "app" {
		t.Errorf("node → uninjected %s:8080 = %q, %v; want its app's own answer", u.Status.PodIP, line, err)
	}
	cluster.LogShows(t, ns, u.Name, "app", 30*time.Second,
		"app dial "+sIP+":8080: proxy captured on :15006 original dst "+sIP+":8080 from "+u.Status.PodIP+":")
	if recs := journalRecords(t, string(u.UID)); len(recs) != 0 {
		t.Errorf("uninjected pod has journal records %v", recs)
	}

	// DEL: the record goes with the pod, and while the record lived its
	// netns held the table.
	recs := journalRecords(t, string(s.UID))
	if len(recs) != 1 {
		t.Fatalf("injected pod has %d journal records, want 1", len(recs))
	}
	if recs[0].Netns == "" {
		t.Fatalf("journal record %s names no netns", recs[0].file)
	}
	if out, err := sluiceTable(recs[0].Netns); err != nil {
		t.Fatalf("sluice table in %s: %v\n%s", recs[0].Netns, err, out)
	}
	if err := client(t).CoreV1().Pods(ns).Delete(t.Context(), s.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nodetest.Eventually(t, time.Minute, "the injected pod and its record gone", func() error {
		if _, err := client(t).CoreV1().Pods(ns).Get(t.Context(), s.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("pod still there")
		}
		if r := journalRecords(t, string(s.UID)); len(r) != 0 {
			return fmt.Errorf("records %v", r)
		}
		return nil
	})
	if out, err := sluiceTable(recs[0].Netns); err == nil {
		t.Errorf("sluice table still in %s after DEL:\n%s", recs[0].Netns, out)
	}
}

// A pod whose annotation Istio would reject too never starts uncaptured:
// its sandbox fails, the agent says why on the pod, and the kubelet's
// sandbox error names the annotation.
func TestInvalidAnnotation(t *testing.T) {
	requireAgent(t)
	ns := namespace(t, nil)
	const ann = "traffic.sidecar.istio.io/includeOutboundIPRanges"
	p := cluster.CreatePod(t, ns, sidecarPod("invalid", unreachable, map[string]string{ann: "not-a-cidr"}))
	cs := client(t)
	var agentEvent, sandboxEvent string
	nodetest.Eventually(t, time.Minute, "the agent's Warning and the kubelet's sandbox error", func() error {
		evs, err := cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, ann) {
				continue
			}
			switch e.Reason {
			case "CaptureFailed":
				agentEvent = e.Message
			case "FailedCreatePodSandBox":
				sandboxEvent = e.Message
			}
		}
		if agentEvent == "" || sandboxEvent == "" {
			return fmt.Errorf("agent event %q, sandbox event %q; events: %v", agentEvent, sandboxEvent, evs.Items)
		}
		return nil
	})
	// kubectl shows this as ContainerCreating: Pending, no container
	// started, the sandbox retried.
	got := cluster.GetPod(t, ns, p.Name)
	if got.Status.Phase != corev1.PodPending {
		t.Errorf("pod with an invalid annotation: %s, want Pending", nodetest.PodState(got))
	}
	for _, c := range append(got.Status.InitContainerStatuses, got.Status.ContainerStatuses...) {
		if c.State.Running != nil || c.State.Terminated != nil {
			t.Errorf("container %s started although its pod cannot be captured: %s", c.Name, nodetest.PodState(got))
		}
		if w := c.State.Waiting; w != nil && w.Reason != "PodInitializing" && w.Reason != "ContainerCreating" {
			t.Errorf("container %s waits for %s, want the sandbox", c.Name, w.Reason)
		}
	}
	t.Logf("agent: %s", agentEvent)
	t.Logf("kubelet: %s", sandboxEvent)
}
