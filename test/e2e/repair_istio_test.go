package e2e

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/istiotest"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// istioPod is a running pod istio-cni captured: Istio's own rule text in
// its netns and a proxy listening on 15001 (Envoy, or ztunnel's in-pod
// socket), which a connection out of the pod reaches.
type istioPod struct {
	pod    *corev1.Pod
	sb     *nstest.NS
	landed <-chan netip.AddrPort
}

func (n *node) istioPod(t *testing.T, c kubernetes.Interface, ns string, p *corev1.Pod, rules istiotest.Ruleset) istioPod {
	t.Helper()
	ip := nstest.TestIP(t)
	pod := runningPod(t, c, ns, p, ip)
	sb := n.podSandbox(t, p.Name, pod, ip)
	istiotest.Program(t, sb, rules)
	ip2 := istioPod{pod: pod, sb: sb, landed: istiotest.Proxy(t, sb, 15001)}
	istiotest.ExpectCaptured(t, sb, ip2.landed, p.Name+" under Istio's rules")
	return ip2
}

// A node swaps from istio-cni to sluice (--istio-takeover) with three pods
// Istio captured running: sidecar by iptables-nft, sidecar by nftables,
// ambient by nftables. ztunnel's first snapshot from sluice lists the
// ambient pod, so its proxy stays; each pod ends with sluice's table and
// none of Istio's rules (never a second ruleset), journaled and in sync;
// its connections land on the proxy before and after; ztunnel never hears
// Del.
func TestRepairAdoptsIstioCNIPods(t *testing.T) {
	env, admin := sharedKube(t)
	createNamespace(t, admin, "mig")
	n := newNode(t)
	pods := []istioPod{
		n.istioPod(t, admin, "mig", sidecarPod("sc-ipt", nil), istiotest.SidecarIptables),
		n.istioPod(t, admin, "mig", sidecarPod("sc-nft", nil), istiotest.SidecarNft),
		n.istioPod(t, admin, "mig", ambientPod("amb"), istiotest.AmbientNft),
	}
	amb := pods[2]

	zsock := filepath.Join(t.TempDir(), "zt", "ztunnel.sock")
	n.kubeAgent(env, "--ambient", "--host-netns", n.NS.Path, "--ztunnel-socket", zsock,
		"--netns-roots", n.Root+",/proc", "--host-proc", "/proc", "--istio-takeover")
	// The sweep at start is done once the sidecar pods are adopted; the
	// ambient pod waits for ztunnel, under Istio's rules.
	for _, p := range pods[:2] {
		kubetest.WaitPodEvent(t, admin, p.pod, "IstioCNIAdopted")
	}
	if state := istiotest.Save(t, amb.sb); !strings.Contains(state, "istio-ambient-nat") || strings.Contains(state, "inet sluice") {
		t.Fatalf("the ambient pod was touched before ztunnel connected:\n%s", state)
	}
	z := connectZDS(t, zsock)
	req, ino := z.next()
	if req.GetAdd().GetUid() != string(amb.pod.UID) || ino != netnsInode(t, amb.sb) ||
		req.GetAdd().GetWorkloadInfo().GetServiceAccount() != "amb-sa" {
		t.Fatalf("ztunnel's snapshot began with %v (netns %d): want istio-cni's ambient pod with its netns", req, ino)
	}
	if req, _ := z.next(); req.GetSnapshotSent() == nil {
		t.Fatalf("want the end of the snapshot, got %v", req)
	}
	// Adopted once ztunnel holds its snapshot: handed over again, same netns.
	if req, ino := z.next(); req.GetAdd().GetUid() != string(amb.pod.UID) || ino != netnsInode(t, amb.sb) {
		t.Fatalf("ztunnel got %v (netns %d), want the adopted pod's Add", req, ino)
	}

	for _, p := range pods {
		id := "late-" + string(p.pod.UID)
		nstest.Eventually(t, 10*time.Second, func() bool {
			for _, w := range n.Workloads(t) {
				if w.ContainerId == id {
					return true
				}
			}
			return false
		}, "pod %s never adopted:\n%s", p.pod.Name, n.agent.Logs)
		n.expectInSync(t, id)
		state := istiotest.Save(t, p.sb)
		if strings.Contains(state, "ISTIO_") || strings.Contains(state, "istio-") || !strings.Contains(state, "table inet sluice") {
			t.Errorf("pod %s: want sluice's table and nothing of Istio's:\n%s", p.pod.Name, state)
		}
		istiotest.ExpectCaptured(t, p.sb, p.landed, p.pod.Name+" under sluice's rules")
		kubetest.WaitPodEvent(t, admin, p.pod, "IstioCNIAdopted")
	}
	got, err := admin.CoreV1().Pods("mig").Get(context.Background(), "amb", metav1.GetOptions{})
	if err != nil || got.Annotations["ambient.istio.io/redirection"] != "enabled" {
		t.Errorf("ambient pod lost its redirection annotation: %v %v", got.Annotations, err)
	}
	z.uc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, _, _, _, err := z.uc.ReadMsgUnix(make([]byte, 1024), nil); err == nil {
		t.Errorf("ztunnel got a further %d-byte request after the adoption (a Del?)", n)
	}
}

// Without --istio-takeover a sidecar pod istio-cni captured keeps Istio's
// rules, untouched, and gets no second ruleset (an Event says why), while
// an ambient pod istio-cni enrolled (iptables-nft here) is adopted all the
// same: ztunnel holds it only while the node agent lists it.
func TestRepairLeavesIstioCNIPodsWithoutTakeover(t *testing.T) {
	env, admin := sharedKube(t)
	createNamespace(t, admin, "left")
	n := newNode(t)
	p := n.istioPod(t, admin, "left", sidecarPod("sc", nil), istiotest.SidecarIptables)
	amb := n.istioPod(t, admin, "left", ambientPod("amb"), istiotest.AmbientIptables)
	before := istiotest.Save(t, p.sb)

	zsock := filepath.Join(t.TempDir(), "zt", "ztunnel.sock")
	n.kubeAgent(env, "--ambient", "--host-netns", n.NS.Path, "--ztunnel-socket", zsock,
		"--netns-roots", n.Root+",/proc", "--host-proc", "/proc")
	kubetest.WaitPodEvent(t, admin, p.pod, "IstioCNICaptured")
	z := connectZDS(t, zsock)
	for i, want := range []string{"snapshot", "end", "adopted"} {
		req, ino := z.next()
		switch {
		case want == "end" && req.GetSnapshotSent() == nil,
			want != "end" && (req.GetAdd().GetUid() != string(amb.pod.UID) || ino != netnsInode(t, amb.sb)):
			t.Fatalf("ztunnel request %d is %v (netns %d), want the ambient pod's %s", i, req, ino, want)
		}
	}
	kubetest.WaitPodEvent(t, admin, amb.pod, "IstioCNIAdopted")
	if state := istiotest.Save(t, amb.sb); strings.Contains(state, "ISTIO_") || !strings.Contains(state, "table inet sluice") {
		t.Errorf("ambient pod: want sluice's table and nothing of Istio's:\n%s", state)
	}
	istiotest.ExpectCaptured(t, amb.sb, amb.landed, "the adopted ambient pod")

	if after := istiotest.Save(t, p.sb); after != before {
		t.Errorf("the sidecar pod's netns changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for _, w := range n.Workloads(t) {
		if w.ContainerId == "late-"+string(p.pod.UID) {
			t.Errorf("the agent enrolled the sidecar pod istio-cni captured")
		}
	}
	istiotest.ExpectCaptured(t, p.sb, p.landed, "Istio's rules, left")
}

// ambientPod is a pod istio-cni enrolled in ambient: labelled, and
// annotated by Istio's node agent.
func ambientPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{"istio.io/dataplane-mode": "ambient"},
			Annotations: map[string]string{"ambient.istio.io/redirection": "enabled"}},
		Spec: corev1.PodSpec{NodeName: kubeNode, ServiceAccountName: name + "-sa", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
}
