package nri

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// fakeCNI stands in for rpc.CNI: it records calls and enrols into a map,
// so the plugin's own logic (what it sends, when it refuses) is tested
// without a kernel. test/nri runs the real agent against containerd.
type fakeCNI struct {
	mu      sync.Mutex
	recs    map[workloads.Attachment]workloads.Record
	adds    []*sluicev1.AddRequest
	dels    []*sluicev1.DelRequest
	addErr  error
	passAll string // non-empty: every pod is passed through with this reason
}

func newFake() *fakeCNI { return &fakeCNI{recs: map[workloads.Attachment]workloads.Record{}} }

func (f *fakeCNI) Add(_ context.Context, req *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.adds = append(f.adds, req)
	if f.addErr != nil {
		return nil, f.addErr
	}
	if f.passAll != "" {
		return &sluicev1.AddResponse{Reason: f.passAll}, nil
	}
	a := workloads.Attachment{ContainerID: req.ContainerId, IfName: req.IfName}
	f.recs[a] = workloads.Record{Attachment: a, Netns: req.Netns}
	return &sluicev1.AddResponse{Enrolled: true}, nil
}

func (f *fakeCNI) Del(_ context.Context, req *sluicev1.DelRequest) (*sluicev1.DelResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dels = append(f.dels, req)
	delete(f.recs, workloads.Attachment{ContainerID: req.ContainerId, IfName: req.IfName})
	return &sluicev1.DelResponse{}, nil
}

func (f *fakeCNI) Get(a workloads.Attachment) (workloads.Record, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.recs[a]
	return r, ok
}

func (f *fakeCNI) List() []workloads.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []workloads.Record
	for _, r := range f.recs {
		out = append(out, r)
	}
	return out
}

func newPlugin(f *fakeCNI) *Plugin {
	return New(f, f, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
}

func pod(id, netns string, ips ...string) *api.PodSandbox {
	p := &api.PodSandbox{Id: id, Name: "cart", Namespace: "shop", Uid: "uid-" + id, Ips: ips, Linux: &api.LinuxPodSandbox{}}
	if netns != "" {
		p.Linux.Namespaces = []*api.LinuxNamespace{{Type: "ipc"}, {Type: "network", Path: netns}}
	}
	return p
}

func TestRunPodSandboxSendsTheCNIAdd(t *testing.T) {
	f := newFake()
	p := newPlugin(f)
	if err := p.RunPodSandbox(t.Context(), pod("abc123", "/var/run/netns/cni-1", "10.89.0.5", "fd00::5")); err != nil {
		t.Fatal(err)
	}
	if len(f.adds) != 1 {
		t.Fatalf("%d ADDs, want 1", len(f.adds))
	}
	req := f.adds[0]
	if req.ContainerId != "abc123" || req.IfName != "eth0" || req.Netns != "/var/run/netns/cni-1" ||
		req.Pod.GetNamespace() != "shop" || req.Pod.GetName() != "cart" || req.Pod.GetUid() != "uid-abc123" ||
		req.ApiVersion != sluicev1.ApiVersion_API_VERSION_2 {
		t.Fatalf("ADD = %v", req)
	}
	if len(req.Ips) != 2 || req.Ips[0].Address != "10.89.0.5" || req.Ips[1].Address != "fd00::5" {
		t.Fatalf("ADD IPs = %v", req.Ips)
	}
	// A repeated event (or the CNI trigger's record in "both" mode) is not
	// enrolled twice.
	if err := p.RunPodSandbox(t.Context(), pod("abc123", "/var/run/netns/cni-1")); err != nil || len(f.adds) != 1 {
		t.Fatalf("second RunPodSandbox: err %v, %d ADDs; want no new ADD", err, len(f.adds))
	}
}

func TestHostNetworkPodIsNeverAnError(t *testing.T) {
	f := newFake()
	f.addErr = errors.New("must not be called")
	p := newPlugin(f)
	if err := p.RunPodSandbox(t.Context(), pod("host1", "")); err != nil {
		t.Fatalf("host-network pod: %v", err)
	}
	if _, _, err := p.CreateContainer(t.Context(), pod("host1", ""), &api.Container{Name: "app"}); err != nil {
		t.Fatalf("container of a host-network pod refused: %v", err)
	}
	if len(f.adds) != 0 {
		t.Fatalf("ADD sent for a host-network pod: %v", f.adds)
	}
}

func TestCaptureFailureFailsTheSandbox(t *testing.T) {
	f := newFake()
	f.addErr = errors.New("ztunnel is not connected")
	p := newPlugin(f)
	err := p.RunPodSandbox(t.Context(), pod("abc123", "/var/run/netns/cni-1"))
	if err == nil || !strings.Contains(err.Error(), "ztunnel is not connected") || !strings.Contains(err.Error(), "shop/cart") {
		t.Fatalf("err = %v, want the cause and the pod", err)
	}
}

func TestCreateContainerGate(t *testing.T) {
	f := newFake()
	p := newPlugin(f)
	ctr := &api.Container{Name: "app"}
	// Missed sandbox, capture possible now: enrolled, container allowed.
	if _, _, err := p.CreateContainer(t.Context(), pod("missed", "/var/run/netns/cni-2"), ctr); err != nil {
		t.Fatalf("CreateContainer of a capturable missed pod: %v", err)
	}
	if _, ok := f.Get(workloads.Attachment{ContainerID: "missed", IfName: "eth0"}); !ok {
		t.Fatal("the missed pod was not enrolled by CreateContainer")
	}
	// Missed sandbox, capture impossible: refused.
	f.addErr = errors.New("netns gone")
	_, _, err := p.CreateContainer(t.Context(), pod("broken", "/var/run/netns/cni-3"), ctr)
	if err == nil || !strings.Contains(err.Error(), "not captured") {
		t.Fatalf("CreateContainer of an uncapturable pod: err = %v, want a refusal", err)
	}
	// Passed through by policy: allowed without asking again.
	f.addErr, f.passAll = nil, "not injected"
	if err := p.RunPodSandbox(t.Context(), pod("plain", "/var/run/netns/cni-4")); err != nil {
		t.Fatal(err)
	}
	f.addErr = errors.New("must not be called")
	if _, _, err := p.CreateContainer(t.Context(), pod("plain", "/var/run/netns/cni-4"), ctr); err != nil {
		t.Fatalf("container of a passed-through pod refused: %v", err)
	}
}

func TestSynchronizeReleasesGoneAndEnrolsMissing(t *testing.T) {
	f := newFake()
	gone := workloads.Attachment{ContainerID: "gone", IfName: "eth0"}
	late := workloads.Attachment{ContainerID: "late-uid", IfName: "eth0"}
	f.recs[gone] = workloads.Record{Attachment: gone}
	f.recs[late] = workloads.Record{Attachment: late, Late: true}
	p := newPlugin(f)
	if _, err := p.Synchronize(t.Context(), []*api.PodSandbox{pod("live", "/var/run/netns/cni-5"), pod("host", "")}, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Get(gone); ok {
		t.Fatal("the record of a sandbox the runtime does not list was kept")
	}
	if _, ok := f.Get(late); !ok {
		t.Fatal("a late enrolment (the repairer's) was released")
	}
	if _, ok := f.Get(workloads.Attachment{ContainerID: "live", IfName: "eth0"}); !ok {
		t.Fatal("the live pod was not enrolled")
	}
}

func TestSynchronizeForgetsPassedSandboxesThatAreGone(t *testing.T) {
	f := newFake()
	f.passAll = "not injected"
	p := newPlugin(f)
	if err := p.RunPodSandbox(t.Context(), pod("old", "/var/run/netns/cni-6")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Synchronize(t.Context(), nil, nil); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	n := len(p.passed)
	p.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d pass-through decisions kept for sandboxes the runtime no longer lists", n)
	}
}

func TestBudgetStaysUnderTheRuntimeTimeout(t *testing.T) {
	for _, tc := range []struct{ timeout, want time.Duration }{
		{0, time.Second}, {2 * time.Second, time.Second}, {500 * time.Millisecond, 250 * time.Millisecond}, {10 * time.Second, time.Second},
	} {
		if got := budgetFor(tc.timeout); got != tc.want {
			t.Errorf("budgetFor(%v) = %v, want %v", tc.timeout, got, tc.want)
		}
	}
}

func TestReadyFollowsTheConnection(t *testing.T) {
	p := newPlugin(newFake())
	if ok, why := p.Ready(); ok || !strings.Contains(why, "not connected") {
		t.Fatalf("Ready before connecting = %v %q", ok, why)
	}
	p.setConnected(true)
	if ok, _ := p.Ready(); !ok {
		t.Fatal("not ready while connected")
	}
}

// A socket nobody serves: Run keeps trying with a growing backoff and
// returns when ctx ends.
func TestRunRetriesUntilCancelled(t *testing.T) {
	p := newPlugin(newFake())
	ctx, cancel := context.WithTimeout(t.Context(), 400*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, t.TempDir()+"/none.sock") }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil on cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
