package podcheck

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/istioadopt"
	"github.com/sluicemesh/sluice/daemon/late"
	"github.com/sluicemesh/sluice/daemon/repair"
	"github.com/sluicemesh/sluice/test/harness/istiotest"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
)

// A sidecar pod istio-cni captured is not uncaptured: without
// --istio-takeover, no repair mode touches it (no second ruleset, no label,
// no eviction), and one Event says why.
func TestIstioCapturedPodLeftToIstio(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules istiotest.Ruleset
		mode  string
	}{
		{"nftables apply", istiotest.SidecarNft, repair.ModeApply},
		{"iptables-nft apply", istiotest.SidecarIptables, repair.ModeApply},
		{"iptables-nft delete", istiotest.SidecarIptables, repair.ModeDelete},
		{"nftables label", istiotest.SidecarNft, repair.ModeLabel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := podtest.Start(t)
			_, admin := podtest.Kube(t)
			ns := podtest.Namespace(t, admin)
			ip := nstest.TestIP(t)
			pod := podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "istio", true), ip)
			sb := podtest.Sandbox(t, string(pod.UID), ip, true)
			istiotest.Program(t, sb, tc.rules)
			before := istiotest.Save(t, sb)

			r := runAdopting(t, a, tc.mode, false, nil)
			ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonIstioCNICaptured)
			if ev.Type != corev1.EventTypeNormal || !strings.Contains(ev.Message, "--istio-takeover") {
				t.Errorf("event %s %q: want Normal, naming --istio-takeover", ev.Type, ev.Message)
			}
			waitSwept(t, r)
			if after := istiotest.Save(t, sb); after != before {
				t.Errorf("the pod's netns changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if _, ok := podtest.EnrolledAs(a.Store, string(pod.UID)); ok {
				t.Error("the pod was enrolled")
			}
			p, err := admin.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
			if err != nil || p.DeletionTimestamp != nil || p.Labels[repair.LabelUncaptured] != "" {
				t.Errorf("the pod was touched: %v, labels %v, deleting %v", err, p.Labels, p.DeletionTimestamp)
			}
			if got := r.Counts(); got[istioadopt.OutcomeCaptured] != 1 || len(got) != 1 {
				t.Errorf("Counts = %v, want one %s and nothing else", got, istioadopt.OutcomeCaptured)
			}
		})
	}
}

// With --istio-takeover a pod istio-cni captured is swapped to sluice in
// place: a connection lands on the proxy before and after, and afterwards
// the netns holds sluice's table and none of Istio's rules.
func TestIstioTakeover(t *testing.T) {
	for _, rules := range []istiotest.Ruleset{istiotest.SidecarNft, istiotest.SidecarIptables} {
		t.Run(rules.File, func(t *testing.T) {
			a := podtest.Start(t)
			_, admin := podtest.Kube(t)
			ns := podtest.Namespace(t, admin)
			ip := nstest.TestIP(t)
			pod := podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "istio", true), ip)
			sb := podtest.Sandbox(t, string(pod.UID), ip, true)
			istiotest.Program(t, sb, rules)
			landed := istiotest.Proxy(t, sb, 15001)
			istiotest.ExpectCaptured(t, sb, landed, "Istio's rules")

			r := runAdopting(t, a, repair.ModeApply, true, nil)
			rec := a.WaitEnrolled(t, pod)
			if !rec.Late || rec.ContainerID != late.ContainerID(string(pod.UID)) {
				t.Errorf("record %+v: want a late enrolment", rec)
			}
			ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonIstioCNIAdopted)
			if ev.Type != corev1.EventTypeNormal {
				t.Errorf("%s is %s, want Normal", events.ReasonIstioCNIAdopted, ev.Type)
			}
			state := istiotest.Save(t, sb)
			if strings.Contains(state, "ISTIO_") || strings.Contains(state, "istio-") {
				t.Errorf("Istio's capture left beside sluice's:\n%s", state)
			}
			if !strings.Contains(state, "table inet sluice") {
				t.Errorf("no sluice table:\n%s", state)
			}
			if drift, err := a.Store.Verify(rec); err != nil || len(drift) > 0 {
				t.Errorf("the adopted pod is not in sync: %v %v", drift, err)
			}
			istiotest.ExpectCaptured(t, sb, landed, "sluice's rules")
			if got := r.Counts(); got[istioadopt.OutcomeAdopted] != 1 || len(got) != 1 {
				t.Errorf("Counts = %v, want one %s", got, istioadopt.OutcomeAdopted)
			}
		})
	}
}

// When Istio's capture cannot be removed (here: a jump into ISTIO_OUTPUT
// appears between Detect and Remove, so the kernel refuses the batch),
// sluice's table is taken back: the pod is as Istio had it, captured once,
// and the failure is on the pod.
func TestIstioTakeoverRollsBack(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	ip := nstest.TestIP(t)
	pod := podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "istio", true), ip)
	sb := podtest.Sandbox(t, string(pod.UID), ip, true)
	istiotest.Program(t, sb, istiotest.SidecarIptables)
	landed := istiotest.Proxy(t, sb, 15001)
	var before string
	racer := &racingIstio{onRemove: func() {
		sb.Run(t, "iptables-nft", "-t", "nat", "-I", "OUTPUT", "-p", "udp", "-j", "ISTIO_OUTPUT")
		before = strings.Join(istiotest.WithoutSluice(istiotest.Save(t, sb)), "\n")
	}}

	r := runAdopting(t, a, repair.ModeApply, true, racer)
	ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonCaptureRepairFailed)
	if !strings.Contains(ev.Message, "Istio's capture is as it was") {
		t.Errorf("failure event %q does not say the pod was rolled back", ev.Message)
	}
	waitSwept(t, r)
	if racer.removes == 0 {
		t.Fatal("Remove never ran")
	}
	if after := istiotest.Save(t, sb); after != before {
		t.Errorf("a failed takeover changed the netns:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, ok := podtest.EnrolledAs(a.Store, string(pod.UID)); ok {
		t.Error("the pod was enrolled")
	}
	if got := r.Counts(); got[OutcomeFailed] != 1 || got[istioadopt.OutcomeAdopted] != 0 {
		t.Errorf("Counts = %v, want one failed", got)
	}
	istiotest.ExpectCaptured(t, sb, landed, "Istio's rules after the rollback")
}

// racingIstio is the kernel with a change made by someone else between
// the repairer's Detect and its Remove.
type racingIstio struct {
	onRemove func()
	removes  int
}

func (r *racingIstio) Detect(ns netns.NsHandle) (istioadopt.Capture, error) {
	return istioadopt.Detect(ns)
}

func (r *racingIstio) Remove(ns netns.NsHandle, c istioadopt.Capture) error {
	r.removes++
	r.onRemove()
	return istioadopt.Remove(ns, c)
}

// runAdopting runs a Repairer with the adoption settings until t ends. A
// failed check is retried only after an hour: the tests count exactly the
// tries they caused, which the 30s default would add to on a slow run.
func runAdopting(t *testing.T, a *podtest.Parts, mode string, takeover bool, kernel istioadopt.Kernel) *Checker {
	t.Helper()
	r, err := New(Config{Policy: a.Policy, Pods: a.Cache.Pods, Namespaces: a.Cache.Namespaces, Store: a.Store, Client: a.Client, Events: a.Events,
		HostProc: "/proc", Mode: mode, NodeName: a.Node, Log: podtest.Log(t), IstioTakeover: takeover, IstioCNI: kernel, RetryAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}
