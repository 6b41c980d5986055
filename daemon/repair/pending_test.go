package repair

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/daemon/istioadopt/istiotest"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/internal/nstest"
)

// The pending list is the node's running pods marked
// ambient.istio.io/redirection=enabled that sluice has not enrolled and
// whose netns holds istio-cni's rules, each with its netns: what ztunnel
// must keep across the swap. A pod that marked itself is not listed.
func TestPendingAmbientListsIstioEnrolledPods(t *testing.T) {
	a := startAgentParts(t)
	_, admin := kube(t)
	ns := namespace(t, admin)
	opener, err := podns.NewOpener([]string{"/proc"}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPendingAmbient(a.cache.Pods, a.store.List, "/proc", opener.Open, nil, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	mark := func(name string) *metav1.ObjectMeta {
		pod := a.createPod(t, admin, ns, name, false)
		pod.Annotations = map[string]string{AnnotationRedirection: "enabled"}
		got, err := admin.CoreV1().Pods(ns).Update(context.Background(), pod, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return &got.ObjectMeta
	}
	ipA, ipB := nstest.TestIP(t), nstest.TestIP(t)
	podA := mark("istio-a")
	runA := setRunning(t, admin, mustGet(t, admin, ns, "istio-a"), ipA)
	sbA := sandbox(t, string(runA.UID), ipA, true)
	istiotest.Program(t, sbA, istiotest.AmbientIptables)
	// A pod opted out of ambient that set the annotation on itself.
	ipS := nstest.TestIP(t)
	self := setRunning(t, admin, mustGet(t, admin, ns, mark("self-marked").Name), ipS)
	sandbox(t, string(self.UID), ipS, true)
	podB := mark("adopted")
	setRunning(t, admin, mustGet(t, admin, ns, "adopted"), ipB)
	setRunning(t, admin, a.createPod(t, admin, ns, "plain", false), nstest.TestIP(t))
	// "adopted" is already in sluice's journal.
	sandbox(t, string(podB.UID), ipB, true)
	pathB, err := podns.FindPodNetns("/proc", string(podB.UID), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.store.Enroll(context.Background(), workloads.Record{
		Attachment: workloads.Attachment{ContainerID: LateContainerID(string(podB.UID)), IfName: "eth0"},
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
func TestPendingAmbientWaitsForTheCache(t *testing.T) {
	c, _ := newKube(t, "never-run", testLog(t))
	store, err := workloads.Open(workloads.Config{Dir: t.TempDir(), Opener: redirecttest.NewNamespaces(t), Kernel: redirecttest.NewFake(), Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPendingAmbient(c.Pods, store.List, "/proc", redirecttest.NewNamespaces(t).Open, nil, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if ws, err := p.List(ctx); err == nil {
		t.Fatalf("List before the cache synced = %v, nil; want an error", ws)
	}
}

func mustGet(t *testing.T, c kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
