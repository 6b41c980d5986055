package istioadopt

import (
	"context"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/daemon/late"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/redirection"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/test/harness/istiotest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
)

// The pending list is the node's running pods marked
// ambient.istio.io/redirection=enabled that sluice has not enrolled and
// whose netns holds istio-cni's rules, each with its netns: what ztunnel
// must keep across the swap. A pod that marked itself is not listed.
func TestPendingListsIstioEnrolledPods(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	opener, err := podns.NewOpener([]string{"/proc"}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPending(a.Cache.Pods, a.Store.List, "/proc", opener.Open, nil, podtest.Log(t))
	if err != nil {
		t.Fatal(err)
	}
	mark := func(name string) *metav1.ObjectMeta {
		pod := a.CreatePod(t, admin, ns, name, false)
		pod.Annotations = map[string]string{redirection.Annotation: "enabled"}
		got, err := admin.CoreV1().Pods(ns).Update(context.Background(), pod, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return &got.ObjectMeta
	}
	ipA, ipB := nstest.TestIP(t), nstest.TestIP(t)
	podA := mark("istio-a")
	runA := podtest.SetRunning(t, admin, podtest.Get(t, admin, ns, "istio-a"), ipA)
	sbA := podtest.Sandbox(t, string(runA.UID), ipA, true)
	istiotest.Program(t, sbA, istiotest.AmbientIptables)
	// A pod opted out of ambient that set the annotation on itself.
	ipS := nstest.TestIP(t)
	self := podtest.SetRunning(t, admin, podtest.Get(t, admin, ns, mark("self-marked").Name), ipS)
	podtest.Sandbox(t, string(self.UID), ipS, true)
	podB := mark("adopted")
	podtest.SetRunning(t, admin, podtest.Get(t, admin, ns, "adopted"), ipB)
	podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "plain", false), nstest.TestIP(t))
	// "adopted" is already in sluice's journal.
	podtest.Sandbox(t, string(podB.UID), ipB, true)
	pathB, err := podns.FindPodNetns("/proc", string(podB.UID), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Store.Enroll(context.Background(), workloads.Record{
		Attachment: workloads.Attachment{ContainerID: late.ContainerID(string(podB.UID)), IfName: "eth0"},
		PodUID:     string(podB.UID), Netns: pathB, Spec: redirect.DefaultSpec(),
	}); err != nil {
		t.Fatal(err)
	}

	var got []string
	nstest.Eventually(t, 10*time.Second, func() bool {
		ws, err := p.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, w := range ws {
			got = append(got, w.Name)
			if w.UID == string(podA.UID) && !sameFile(t, w.Netns, sbA.Path) {
				t.Fatalf("pending pod listed with netns %q, not its own", w.Netns)
			}
		}
		return len(got) == 1 && got[0] == "istio-a"
	}, "pending list never became [istio-a]: %v", &got)
}

// Until the pod cache has listed once, the list is unknown, not empty.
func TestPendingWaitsForTheCache(t *testing.T) {
	c, _ := podtest.NewKube(t, "never-run", podtest.Log(t))
	store, err := workloads.Open(workloads.Config{Dir: t.TempDir(), Opener: redirecttest.NewNamespaces(t), Kernel: redirecttest.NewFake(), Log: podtest.Log(t)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPending(c.Pods, store.List, "/proc", redirecttest.NewNamespaces(t).Open, nil, podtest.Log(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if ws, err := p.List(ctx); err == nil {
		t.Fatalf("List before the cache synced = %v, nil; want an error", ws)
	}
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
