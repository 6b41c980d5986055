package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/nodetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rebootPod is a mesh pod the reboot test follows.
type rebootPod struct {
	ns, name, kind string
	uid            string
	appID          string // the app container's ID before the reboot
}

// The node reboots with sidecar and ambient pods running: kubelet,
// containerd, the agent and every container die, /run is emptied, and
// the node boots again; every pod gets a new sandbox and netns. A prober
// outside the node dials each pod's app port throughout and is never
// answered by the app itself (uncaptured inbound, the sign of a pod whose
// rules are not in); each pod's app, restarted, makes its first
// connection captured; sidecar pods answer through their proxy and
// ambient pods through ztunnel again.
func TestReboot(t *testing.T) {
	requireMesh(t)
	pods := startRebootPods(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pr := newProber(t, ctx)
	go watchIPs(ctx, pr, pods)
	waitCaptured(t, pr, pods, time.Minute)

	agentID := readyAgent(t, tagA, time.Minute)
	rebooted := time.Now()
	if err := cluster.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	readyAgentNot(t, tagA, agentID, 3*time.Minute)
	t.Logf("reboot: agent Ready %v after the reboot began", time.Since(rebooted).Round(time.Millisecond))
	nodetest.Eventually(t, 3*time.Minute, "every pod running again with a new app container", func() error {
		for _, p := range pods {
			got, err := client(t).CoreV1().Pods(p.ns).Get(t.Context(), p.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !allRunning(got) || appID(got) == p.appID {
				return fmt.Errorf("%s/%s: %s", p.ns, p.name, nodetest.PodState(got))
			}
		}
		return nil
	})
	t.Logf("reboot: every pod running %v after the reboot began", time.Since(rebooted).Round(time.Millisecond))
	pr.forget()
	waitCaptured(t, pr, pods, time.Minute)
	t.Logf("reboot: every pod captured again %v after the reboot began", time.Since(rebooted).Round(time.Millisecond))
	for _, p := range pods {
		first := firstDial(logs(t, p.ns, p.name, "app"))
		if !dialCaptured(first) {
			t.Errorf("%s pod %s/%s after the reboot: its app's first dial got %q, want captured", p.kind, p.ns, p.name, first)
		}
	}
	stop()
	pr.wg.Wait()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for ip, n := range pr.counts {
		t.Logf("prober %s: captured=%d down=%d app=%d", ip, n[probeCaptured], n[probeDown], n[probeApp])
	}
	if len(pr.apps) > 0 {
		t.Errorf("the app itself answered the prober %d times, uncaptured: %s", len(pr.apps), strings.Join(pr.apps, ", "))
	}
}

// startRebootPods starts two sidecar and two ambient pods and waits for
// them.
func startRebootPods(t *testing.T) []*rebootPod {
	sidecarNS := namespace(t, "reboot", nil)
	ambientNS := namespace(t, "reboot-ambient", map[string]string{labelDataplane: "ambient"})
	var pods []*rebootPod
	for i := range 2 {
		pods = append(pods,
			&rebootPod{ns: sidecarNS, name: fmt.Sprintf("sidecar-%d", i), kind: kindSidecar},
			&rebootPod{ns: ambientNS, name: fmt.Sprintf("ambient-%d", i), kind: kindAmbient})
	}
	cs := client(t)
	for _, p := range pods {
		got, err := cs.CoreV1().Pods(p.ns).Create(t.Context(), podOfKind(p.kind, p.name), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod %s/%s: %v", p.ns, p.name, err)
		}
		p.uid = string(got.UID)
	}
	nodetest.Eventually(t, 2*time.Minute, "the reboot test's pods running", func() error {
		for _, p := range pods {
			got, err := cs.CoreV1().Pods(p.ns).Get(t.Context(), p.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !allRunning(got) {
				return fmt.Errorf("%s/%s: %s", p.ns, p.name, nodetest.PodState(got))
			}
			p.appID = appID(got)
		}
		return nil
	})
	return pods
}

// appID is the app container's ID.
func appID(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "app" {
			return cs.ContainerID
		}
	}
	return ""
}

// watchIPs hands the prober every address the pods have had, polling the
// API server until ctx ends: after a reboot a pod may come back on
// another.
func watchIPs(ctx context.Context, pr *prober, pods []*rebootPod) {
	cs, err := cluster.Client()
	if err != nil {
		return
	}
	for ; ctx.Err() == nil; time.Sleep(200 * time.Millisecond) {
		for _, p := range pods {
			got, err := cs.CoreV1().Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
			if err == nil && got.Status.PodIP != "" {
				pr.watch(got.Status.PodIP)
			}
		}
	}
}

// waitCaptured waits until the prober has been answered captured at each
// pod's current address: by the stand-in proxy for a sidecar pod, by
// ztunnel in the pod's name for an ambient one.
func waitCaptured(t *testing.T, pr *prober, pods []*rebootPod, timeout time.Duration) {
	t.Helper()
	nodetest.Eventually(t, timeout, "the prober answered captured by every pod", func() error {
		for _, p := range pods {
			got, err := client(t).CoreV1().Pods(p.ns).Get(t.Context(), p.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			want := "proxy captured on :15006"
			if p.kind == kindAmbient {
				want = "ztunnel " + p.uid + " captured on :15006"
			}
			if line := pr.captured(got.Status.PodIP); !strings.HasPrefix(line, want) {
				return fmt.Errorf("%s/%s at %s: last captured reply %q, want %q", p.ns, p.name, got.Status.PodIP, line, want)
			}
		}
		return nil
	})
}
