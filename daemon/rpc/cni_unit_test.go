package rpc

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/ambientmesh"
	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// The verbs' branches over a real Store on redirecttest's kernel: no root,
// milliseconds. cni_test.go runs them on real netns.

// policyFunc is a Policy from a function.
type policyFunc func(policy.Pod) (policy.Decision, error)

func (f policyFunc) Decide(_ context.Context, p policy.Pod) (policy.Decision, error) { return f(p) }

func capture(spec redirect.Spec) policyFunc {
	return func(policy.Pod) (policy.Decision, error) { return policy.Decision{Capture: true, Spec: spec}, nil }
}

// sinkEvents keeps what would become Events.
type sinkEvents struct {
	mu  sync.Mutex
	got []string
}

func (s *sinkEvents) CaptureFailed(pod events.PodRef, _ events.Sandbox, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, pod.Name)
}

func (s *sinkEvents) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

type unit struct {
	cni    *CNI
	store  *workloads.Store
	ns     *redirecttest.Namespaces
	kernel *redirecttest.Fake
	events *sinkEvents
}

func newUnit(t *testing.T, amb func(*redirecttest.Namespaces) *workloads.Ambient) *unit {
	t.Helper()
	u := &unit{ns: redirecttest.NewNamespaces(t), kernel: redirecttest.NewFake(), events: &sinkEvents{}}
	cfg := workloads.Config{Dir: t.TempDir(), Opener: u.ns, Kernel: u.kernel}
	if amb != nil {
		cfg.Ambient = amb(u.ns)
	}
	var err error
	if u.store, err = workloads.Open(cfg); err != nil {
		t.Fatal(err)
	}
	u.cni = &CNI{Policy: capture(redirect.DefaultSpec()), Workloads: u.store, Events: u.events,
		Ready: func() (bool, string) { return true, "" }, Inflight: NewInflight(4)}
	return u
}

func addReq(id string) *sluicev1.AddRequest {
	return &sluicev1.AddRequest{ApiVersion: apiVersion, ContainerId: id, Netns: "/netns/" + id, IfName: "eth0",
		Pod: &sluicev1.PodRef{Namespace: "ns", Name: "pod-" + id, Uid: "uid-" + id},
		Ips: []*sluicev1.IPConfig{{Address: "10.1.0.2/24"}}, Config: &sluicev1.PluginConfig{NetworkName: "net-a"}}
}

// add makes the netns and calls Add.
func (u *unit) add(id string) (*sluicev1.AddResponse, uint64, error) {
	ino := u.ns.Add("/netns/" + id)
	resp, err := u.cni.Add(context.Background(), addReq(id))
	return resp, ino, err
}

func (u *unit) hasTable(ino uint64) bool {
	_, ok := u.kernel.Table(ino)
	return ok
}

func TestUnitAddEnrolls(t *testing.T) {
	u := newUnit(t, nil)
	resp, ino, err := u.add("c1")
	if err != nil || !resp.Enrolled || resp.Mode != sluicev1.Mode_MODE_SIDECAR {
		t.Fatalf("ADD: %v %v", resp, err)
	}
	got := u.store.List()
	if len(got) != 1 || got[0].Network != "net-a" || got[0].PodUID != "uid-c1" || !slices.Equal(got[0].IPs, []netip.Prefix{netip.MustParsePrefix("10.1.0.2/24")}) {
		t.Fatalf("record %+v", got)
	}
	if !u.hasTable(ino) {
		t.Fatal("no table after an enrolling ADD")
	}
}

func TestUnitAddPassesThrough(t *testing.T) {
	u := newUnit(t, nil)
	u.cni.Policy = policyFunc(func(policy.Pod) (policy.Decision, error) {
		return policy.Decision{Reason: "namespace kube-system is excluded"}, nil
	})
	resp, ino, err := u.add("c1")
	if err != nil || resp.Enrolled || resp.Reason != "namespace kube-system is excluded" {
		t.Fatalf("ADD: %v %v", resp, err)
	}
	if u.hasTable(ino) || len(u.store.List()) != 0 {
		t.Fatal("a passed-through pod got state")
	}
}

// Refusals: each with the code the plugin maps, an Event when it is about
// the pod, and no state.
func TestUnitAddRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*unit, *sluicev1.AddRequest)
		code  codes.Code
		event bool
	}{
		{"old api", func(_ *unit, r *sluicev1.AddRequest) { r.ApiVersion = 0 }, codes.FailedPrecondition, false},
		{"bad container id", func(_ *unit, r *sluicev1.AddRequest) { r.ContainerId = "../x" }, codes.InvalidArgument, false},
		{"bad if_name", func(_ *unit, r *sluicev1.AddRequest) { r.IfName = "a/b" }, codes.InvalidArgument, false},
		{"relative netns", func(_ *unit, r *sluicev1.AddRequest) { r.Netns = "netns/x" }, codes.InvalidArgument, true},
		{"netns gone", func(_ *unit, r *sluicev1.AddRequest) { r.Netns = "/netns/gone" }, codes.InvalidArgument, true},
		{"bad annotation", func(u *unit, _ *sluicev1.AddRequest) {
			u.cni.Policy = policyFunc(func(policy.Pod) (policy.Decision, error) {
				return policy.Decision{}, &policy.AnnotationError{Annotation: "a", Value: "v", Err: errors.New("bad")}
			})
		}, codes.InvalidArgument, true},
		{"pod not found", func(u *unit, _ *sluicev1.AddRequest) {
			u.cni.Policy = policyFunc(func(p policy.Pod) (policy.Decision, error) {
				return policy.Decision{}, fmt.Errorf("pod %s: %w", p.Name, policy.ErrPodNotFound)
			})
		}, codes.NotFound, true},
		{"kernel refuses", func(u *unit, _ *sluicev1.AddRequest) {
			u.kernel.Fail(redirecttest.OpApply, errors.New("netlink says no"))
		}, codes.Internal, true},
		{"ambient without --ambient", func(u *unit, _ *sluicev1.AddRequest) {
			u.cni.Policy = capture(redirect.DefaultAmbientSpec())
		}, codes.Internal, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUnit(t, nil)
			ino := u.ns.Add("/netns/c1")
			req := addReq("c1")
			tc.edit(u, req)
			_, err := u.cni.Add(context.Background(), req)
			if code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", code(err), err, tc.code)
			}
			if got := u.events.names(); tc.event != (len(got) == 1) {
				t.Errorf("events %v, want one: %v", got, tc.event)
			}
			if u.hasTable(ino) || len(u.store.List()) != 0 {
				t.Fatal("a refused ADD left state")
			}
		})
	}
}

// A nil EventSink records nothing and does not fail the call.
func TestUnitAddWithoutEvents(t *testing.T) {
	u := newUnit(t, nil)
	u.cni.Events = nil
	u.kernel.Fail(redirecttest.OpApply, errors.New("netlink says no"))
	if _, _, err := u.add("c1"); code(err) != codes.Internal {
		t.Fatalf("code %v (%v)", code(err), err)
	}
}

func TestUnitAmbientAdd(t *testing.T) {
	zt := &fakeZtunnel{}
	u := newUnit(t, func(ns *redirecttest.Namespaces) *workloads.Ambient {
		ns.Add("/host")
		h, err := ns.Open("/host")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return &workloads.Ambient{Ztunnel: zt, Host: h}
	})
	u.cni.Policy = capture(redirect.DefaultAmbientSpec())
	ann := &fakeAnnotator{}
	u.cni.Ambient = &ambientmesh.Mesh{Store: u.store, Redirection: ann}
	if resp, _, err := u.add("ok"); err != nil || resp.Mode != sluicev1.Mode_MODE_AMBIENT {
		t.Fatalf("ambient ADD: %v %v", resp, err)
	}
	zt.refuse = errors.New("ztunnel says no")
	_, ino, err := u.add("refused")
	if code(err) != codes.Internal || u.hasTable(ino) {
		t.Fatalf("ADD with ztunnel refusing: code %v (%v), table left %v", code(err), err, u.hasTable(ino))
	}
	if want := []string{"uid-ok=enabled", "uid-refused=pending"}; !slices.Equal(ann.got, want) {
		t.Fatalf("annotations %v, want %v", ann.got, want)
	}
	if host := u.kernel.HostIPs(u.ns.Inode("/host")); len(host) != 1 || host[0].String() != "10.1.0.2" {
		t.Fatalf("host probe addresses %v", host)
	}
	// A re-ADD of the enrolled pod that ztunnel refuses rolls back to the
	// capture it had: the pod stays enrolled, and istiod must not be told
	// "pending" (it would send the captured pod plain text).
	ann.got = nil
	if _, _, err := u.add("ok"); code(err) != codes.Internal {
		t.Fatalf("re-ADD with ztunnel refusing: code %v (%v)", code(err), err)
	}
	if _, still := u.store.Get(workloads.Attachment{ContainerID: "ok", IfName: "eth0"}); !still {
		t.Fatal("the refused re-ADD dropped the pod's enrolment")
	}
	if len(ann.got) != 0 {
		t.Fatalf("annotations %v after a refused re-ADD of a still-enrolled pod, want none", ann.got)
	}
}

func TestUnitDel(t *testing.T) {
	u := newUnit(t, nil)
	_, ino, err := u.add("c1")
	if err != nil {
		t.Fatal(err)
	}
	del := func(id, netns string) error {
		_, err := u.cni.Del(context.Background(), &sluicev1.DelRequest{ApiVersion: apiVersion, ContainerId: id, Netns: netns, IfName: "eth0"})
		return err
	}
	if err := del("unknown", "/netns/c1"); err != nil || !u.hasTable(ino) {
		t.Fatalf("DEL of an unknown attachment: %v; table kept %v", err, u.hasTable(ino))
	}
	u.ns.Delete("/netns/c1")
	if err := del("c1", "/netns/c1"); err != nil {
		t.Fatalf("DEL with the netns gone: %v", err)
	}
	if len(u.store.List()) != 0 {
		t.Fatal("DEL kept the record")
	}
	if err := del("../x", ""); code(err) != codes.InvalidArgument {
		t.Fatalf("DEL of a bad container id: code %v", code(err))
	}
}

func TestUnitCheck(t *testing.T) {
	u := newUnit(t, nil)
	_, ino, err := u.add("c1")
	if err != nil {
		t.Fatal(err)
	}
	check := func() (*sluicev1.CheckResponse, error) {
		return u.cni.Check(context.Background(), &sluicev1.CheckRequest{ApiVersion: apiVersion, ContainerId: "c1", Netns: "/netns/c1", IfName: "eth0"})
	}
	if resp, err := check(); err != nil || len(resp.Drift) != 0 {
		t.Fatalf("CHECK in sync: %v %v", resp, err)
	}
	u.kernel.Tamper(ino)
	if resp, err := check(); err != nil || len(resp.Drift) != 1 {
		t.Fatalf("CHECK after tampering: %v %v", resp, err)
	}
	u.kernel.Fail(redirecttest.OpVerify, errors.New("netlink says no"))
	if _, err := check(); code(err) != codes.Internal {
		t.Fatalf("CHECK that cannot read the kernel: code %v", code(err))
	}
}

func TestUnitStatus(t *testing.T) {
	u := newUnit(t, nil)
	u.cni.Ready = func() (bool, string) { return false, "policy caches not synced" }
	resp, err := u.cni.Status(context.Background(), &sluicev1.StatusRequest{ApiVersion: apiVersion})
	if err != nil || resp.Ready || resp.Reason != "policy caches not synced" {
		t.Fatalf("STATUS: %v %v", resp, err)
	}
}

func TestUnitGC(t *testing.T) {
	u := newUnit(t, nil)
	_, live, _ := u.add("live")
	_, stale, _ := u.add("stale")
	gc := func(network string, present bool, valid ...string) (*sluicev1.GCResponse, error) {
		req := &sluicev1.GCRequest{ApiVersion: apiVersion, Config: &sluicev1.PluginConfig{NetworkName: network}, ValidAttachmentsPresent: present}
		for _, id := range valid {
			req.ValidAttachments = append(req.ValidAttachments, &sluicev1.Attachment{ContainerId: id, IfName: "eth0"})
		}
		return u.cni.GC(context.Background(), req)
	}
	if _, err := gc("net-a", false); code(err) != codes.InvalidArgument {
		t.Fatalf("GC without the key: code %v", code(err))
	}
	if _, err := gc("", true, "live"); code(err) != codes.InvalidArgument {
		t.Fatalf("GC without a network: code %v", code(err))
	}
	if !u.hasTable(live) || !u.hasTable(stale) {
		t.Fatal("a refused GC removed state")
	}
	resp, err := gc("net-a", true, "live")
	if err != nil || len(resp.Removed) != 1 || resp.Removed[0].ContainerId != "stale" {
		t.Fatalf("GC: %v %v", resp, err)
	}
	if !u.hasTable(live) || u.hasTable(stale) {
		t.Fatal("GC removed the wrong table")
	}
}

func TestUnitDebug(t *testing.T) {
	u := newUnit(t, nil)
	_, ino, err := u.add("c1")
	if err != nil {
		t.Fatal(err)
	}
	d := &Debug{Workloads: u.store, Policy: u.cni.Policy}
	list, err := d.ListWorkloads(context.Background(), &sluicev1.ListWorkloadsRequest{})
	if err != nil || len(list.Workloads) != 1 || list.Workloads[0].Pod.GetUid() != "uid-c1" {
		t.Fatalf("ListWorkloads: %v %v", list, err)
	}
	u.kernel.Tamper(ino)
	got, err := d.GetWorkload(context.Background(), &sluicev1.GetWorkloadRequest{ContainerId: "c1"})
	if err != nil || len(got.Drift) != 1 || got.Ruleset == "" {
		t.Fatalf("GetWorkload: %v %v", got, err)
	}
	if _, err := d.GetWorkload(context.Background(), &sluicev1.GetWorkloadRequest{ContainerId: "nope"}); code(err) != codes.NotFound {
		t.Fatalf("GetWorkload of nothing: code %v", code(err))
	}
}

// ADDs past the in-flight bound wait for a slot, and are counted while
// they wait: the queue depth a burst builds.
func TestUnitInflightCountsWaiters(t *testing.T) {
	l := NewInflight(1)
	release, err := l.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 2)
	for range 2 {
		go func() {
			r, err := l.acquire(context.Background())
			if err == nil {
				r()
			}
			got <- err
		}()
	}
	nstest.Eventually(t, 10*time.Second, func() bool { return l.Waiting() == 2 }, "two ADDs waiting for the one slot")
	release()
	for range 2 {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	if n := l.Waiting(); n != 0 {
		t.Fatalf("%d waiting after every ADD got its slot", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	release, _ = l.acquire(context.Background())
	defer release()
	cancel()
	if _, err := l.acquire(ctx); code(err) != codes.ResourceExhausted || l.Waiting() != 0 {
		t.Fatalf("an ADD whose deadline passed: %v, %d still waiting", err, l.Waiting())
	}
}
