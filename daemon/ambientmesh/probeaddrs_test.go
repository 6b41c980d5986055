package ambientmesh

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

type ackingZtunnel struct{}

func (ackingZtunnel) Add(context.Context, ztunnel.Workload) error { return nil }
func (ackingZtunnel) Del(context.Context, string) error           { return nil }

// AwaitConnection finds the fake connected.
func (ackingZtunnel) AwaitConnection(context.Context, ztunnel.Workload) error { return nil }

// An ambient pod ADDed with no IPs gets the host probe SNAT once its status
// lists its IPs, as Istio's node agent does it: before, the host table was
// fed only from ADD records, and the pod's kubelet probes failed for life.
func TestAmbientPodGetsProbeSNATWhenIPsAppear(t *testing.T) {
	nss, kernel := redirecttest.NewNamespaces(t), redirecttest.NewFake()
	hostIno := nss.Add("/host")
	host, err := nss.Open("/host")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	store, err := workloads.Open(workloads.Config{Dir: t.TempDir(), Opener: nss, Kernel: kernel,
		Ambient: &workloads.Ambient{Ztunnel: ackingZtunnel{}, Host: host}})
	if err != nil {
		t.Fatal(err)
	}
	nss.Add("/netns/c1")
	if err := store.Enroll(context.Background(), workloads.Record{Attachment: workloads.Attachment{ContainerID: "c1", IfName: "eth0"},
		PodNamespace: "shop", PodName: "a", PodUID: "u1", Netns: "/netns/c1", Spec: redirect.DefaultAmbientSpec()}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a", UID: "u1"}}
	client := fake.NewSimpleClientset(pod)
	factory := informers.NewSharedInformerFactory(client, 0)
	if err := learnProbeAddrs(factory.Core().V1().Pods(), store, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	pod = pod.DeepCopy()
	pod.Status.PodIP, pod.Status.PodIPs = "10.0.0.7", []corev1.PodIP{{IP: "10.0.0.7"}, {IP: "fd00::7"}}
	if _, err := client.CoreV1().Pods("shop").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("fd00::7")}
	nstest.Eventually(t, 10*time.Second, func() bool {
		got := kernel.HostIPs(hostIno)
		return slices.Contains(got, want[0]) && slices.Contains(got, want[1])
	}, "the host probe table to learn the pod's status IPs")
}
