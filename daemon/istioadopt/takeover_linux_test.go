package istioadopt

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicemesh/sluice/daemon/late"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
	"github.com/sluicemesh/sluice/test/harness/istiotest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
)

// These run the takeover against the kernel alone (no API server): an
// Adopter with a store, a pod sandbox with Istio's rules, real traffic.

type takeoverRig struct {
	a     *Adopter
	store *workloads.Store
	pod   *corev1.Pod
	sb    *nstest.NS
	path  string
	ns    netns.NsHandle
}

func newTakeoverRig(t *testing.T, rules istiotest.Ruleset, istio Kernel) *takeoverRig {
	t.Helper()
	return newTakeoverRigWith(t, rules, istio, nil)
}

// newTakeoverRigWith is newTakeoverRig with the store's ambient side.
func newTakeoverRigWith(t *testing.T, rules istiotest.Ruleset, istio Kernel, ambient *workloads.Ambient) *takeoverRig {
	t.Helper()
	nstest.RequireRoot(t)
	uid := types.UID("0a0d0000-0000-4000-8000-" + strings.Repeat("0", 11) + "1")
	ip := nstest.TestIP(t)
	sb := podtest.Sandbox(t, string(uid), ip, true)
	istiotest.Program(t, sb, rules)
	opener, err := podns.NewOpener([]string{"/proc"}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	store, err := workloads.Open(workloads.Config{Dir: t.TempDir(), Opener: opener, Kernel: kernel.Netlink{}, Log: podtest.Log(t), Ambient: ambient})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "istio", UID: uid},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String()}}
	path, err := late.FindNetns("/proc", pod)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := opener.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	a, err := NewAdopter(Config{Store: store, HostProc: "/proc", Takeover: true, Kernel: istio, Log: podtest.Log(t)})
	if err != nil {
		t.Fatal(err)
	}
	return &takeoverRig{a: a, store: store, pod: pod, sb: sb, path: path, ns: ns}
}

func (g *takeoverRig) takeOver(t *testing.T) error {
	t.Helper()
	return g.takeOverAs(t, redirect.DefaultSpec())
}

func (g *takeoverRig) takeOverAs(t *testing.T, spec redirect.Spec) error {
	t.Helper()
	c, err := Detect(g.ns)
	if err != nil || !c.Found() {
		t.Fatalf("Detect = %s, %v", c, err)
	}
	d := policy.Decision{Capture: true, Spec: spec, Reason: "test", ServiceAccount: "default"}
	return g.a.takeOver(context.Background(), g.pod, d, g.path, c)
}

// sluice's table is in before Istio's rules go (the pod is never without
// capture), and afterwards only sluice's is there, journaled and in sync;
// a connection lands on the proxy before, and after.
func TestTakeOverOrder(t *testing.T) {
	for _, rules := range []istiotest.Ruleset{istiotest.SidecarNft, istiotest.SidecarIptables, istiotest.AmbientIptables} {
		t.Run(rules.File, func(t *testing.T) {
			var during string
			spy := &racingIstio{}
			g := newTakeoverRig(t, rules, spy)
			spy.onRemove = func() { during = istiotest.Save(t, g.sb) }
			landed := istiotest.Proxy(t, g.sb, 15001)
			istiotest.ExpectCaptured(t, g.sb, landed, "Istio's rules")

			if err := g.takeOver(t); err != nil {
				t.Fatal(err)
			}
			istio := strings.Contains(during, "ISTIO_") || strings.Contains(during, "istio-")
			if !strings.Contains(during, "table inet sluice") || !istio {
				t.Errorf("when Istio's rules were removed, want both rulesets in place:\n%s", during)
			}
			after := istiotest.Save(t, g.sb)
			if strings.Contains(after, "ISTIO_") || strings.Contains(after, "istio-") || !strings.Contains(after, "table inet sluice") {
				t.Errorf("after the takeover, want sluice's table alone:\n%s", after)
			}
			rec, ok := podtest.EnrolledAs(g.store, string(g.pod.UID))
			if !ok || !rec.Late {
				t.Fatalf("not journaled as a late enrolment: %+v", rec)
			}
			if drift, err := g.store.Verify(rec); err != nil || len(drift) > 0 {
				t.Errorf("not in sync: %v %v", drift, err)
			}
			istiotest.ExpectCaptured(t, g.sb, landed, "sluice's rules")
		})
	}
}

// A removal the kernel refuses takes sluice's table back: the netns is
// byte for byte as Istio (and the racer) left it, nothing is journaled,
// and the pod is still captured.
func TestTakeOverRollsBackFailedRemoval(t *testing.T) {
	var before string
	racer := &racingIstio{}
	g := newTakeoverRig(t, istiotest.SidecarIptables, racer)
	racer.onRemove = func() {
		g.sb.Run(t, "iptables-nft", "-t", "nat", "-I", "OUTPUT", "-p", "udp", "-j", "ISTIO_OUTPUT")
		before = istiotest.Save(t, g.sb)
		if !strings.Contains(before, "table inet sluice") {
			t.Errorf("sluice's table was not in before the removal:\n%s", before)
		}
		before = strings.Join(istiotest.WithoutSluice(before), "\n")
	}
	landed := istiotest.Proxy(t, g.sb, 15001)

	err := g.takeOver(t)
	if err == nil || !strings.Contains(err.Error(), "Istio's capture is as it was") {
		t.Fatalf("takeOver = %v, want the removal's failure, rolled back", err)
	}
	after := istiotest.Save(t, g.sb)
	if strings.Contains(after, "inet sluice") {
		t.Errorf("sluice's table left after the rollback:\n%s", after)
	}
	if after != before {
		t.Errorf("the rollback did not restore Istio's state:\nwant:\n%s\ngot:\n%s", before, after)
	}
	if _, ok := podtest.EnrolledAs(g.store, string(g.pod.UID)); ok {
		t.Error("journaled after a failed takeover")
	}
	istiotest.ExpectCaptured(t, g.sb, landed, "Istio's rules after the rollback")
}

// An ambient pod istio-cni enrolled, whose takeover ztunnel refuses, stays
// captured at every moment through two tries (as on two pod updates): at
// ztunnel's Add sluice's table is in beside Istio's rules and a connection
// lands on the proxy; after each refusal Istio's rules are as they were,
// none of sluice's is left, nothing is journaled, and ztunnel never hears
// Del (it still serves the pod for istio-cni).
func TestRefusedAmbientTakeOverKeepsIstio(t *testing.T) {
	nstest.RequireRoot(t)
	host := nstest.New(t, "host")
	hostNS, err := netns.GetFromPath(host.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostNS.Close() })
	if err := (kernel.Netlink{}).EnsureHostTable(redirect.Netns(hostNS), redirect.DefaultHostConfig()); err != nil {
		t.Fatal(err)
	}
	zt := &refusingZtunnel{}
	g := newTakeoverRigWith(t, istiotest.AmbientIptables, nil, &workloads.Ambient{Ztunnel: zt, Host: hostNS})
	landed := istiotest.Proxy(t, g.sb, 15001)
	// Traffic moves the counters; the rules are what must not change.
	counters := regexp.MustCompile(`counter packets \d+ bytes \d+|\[\d+:\d+\]`)
	save := func() string {
		return strings.TrimSpace(counters.ReplaceAllString(istiotest.Save(t, g.sb), "counter"))
	}
	before := save()
	zt.onAdd = func() {
		during := istiotest.Save(t, g.sb)
		if !strings.Contains(during, "table inet sluice") || !strings.Contains(during, "ISTIO_") {
			t.Errorf("at ztunnel's Add, want sluice's table beside Istio's rules:\n%s", during)
		}
		istiotest.ExpectCaptured(t, g.sb, landed, "both rulesets, at ztunnel's Add")
	}
	for try := 1; try <= 2; try++ {
		err := g.takeOverAs(t, redirect.DefaultAmbientSpec())
		if err == nil || !strings.Contains(err.Error(), "Istio's capture is as it was") {
			t.Fatalf("try %d: takeOver = %v, want ztunnel's refusal, rolled back", try, err)
		}
		if after := save(); after != before {
			t.Fatalf("try %d: the netns is not as Istio had it:\nbefore:\n%s\nafter:\n%s", try, before, after)
		}
		istiotest.ExpectCaptured(t, g.sb, landed, "Istio's rules after the refusal")
		if _, ok := podtest.EnrolledAs(g.store, string(g.pod.UID)); ok {
			t.Fatalf("try %d: journaled after a refused takeover", try)
		}
	}
	if zt.adds != 2 || zt.dels != 0 {
		t.Errorf("ztunnel heard %d adds and %d dels, want 2 and 0", zt.adds, zt.dels)
	}
}

// racingIstio is the kernel with a change made by someone else between
// the Adopter's Detect and its Remove.
type racingIstio struct {
	onRemove func()
	removes  int
}

func (r *racingIstio) Detect(ns netns.NsHandle) (Capture, error) { return Detect(ns) }

func (r *racingIstio) Remove(ns netns.NsHandle, c Capture) error {
	r.removes++
	r.onRemove()
	return Remove(ns, c)
}

// refusingZtunnel refuses every Add, after onAdd looks at the kernel.
type refusingZtunnel struct {
	onAdd      func()
	adds, dels int
}

func (z *refusingZtunnel) Add(context.Context, ztunnel.Workload) error {
	z.adds++
	if z.onAdd != nil {
		z.onAdd()
	}
	return fmt.Errorf("%w: workload has no identity", ztunnel.ErrRefused)
}

func (z *refusingZtunnel) Del(context.Context, string) error {
	z.dels++
	return nil
}

// AwaitConnection finds the fake connected.
func (z *refusingZtunnel) AwaitConnection(context.Context, ztunnel.Workload) error { return nil }
