package istioadopt_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/istioadopt"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/test/harness/controlplane"
)

// Adoption over the control-plane tier (test/harness/controlplane): a
// running pod istio-cni captured in, the Adopter's answer out (handled,
// counted, failed) with the pod's ruleset as nft text, what is left of
// istio-cni's capture, the redirection annotation, ztunnel's hold, the
// journal and the Events, as uid 65534. takeover_linux_test.go runs the
// swap on real netns and nftables as root.

var (
	sidecarPod = controlplane.Pod{Namespace: "app", Name: "web", Injected: true}
	ambientPod = controlplane.Pod{Namespace: "mesh", Name: "web"}
)

type adoptRow struct {
	name     string
	pod      controlplane.Pod
	istio    istioadopt.Capture
	takeover bool
	noZt     bool
	fail     func(n *controlplane.Node) // a fault before the check
	checks   int                        // Check calls; 0 is 1
	want     adoptWant
}

type adoptWant struct {
	handled     bool
	err         bool
	outcome     string // of the last check
	rules       string // a controlplane golden; "" no table
	istio       string // istio-cni's capture left, "none" gone
	redirection string
	ztunnel     bool
	events      []string
}

func TestAdoption(t *testing.T) {
	sidecar, ambient := controlplane.GoldenSidecar, controlplane.GoldenAmbient
	istioSidecar, istioAmbient := controlplane.Sidecar.String(), controlplane.Ambient.String()
	broken := errors.New("netlink: operation not permitted")
	for _, r := range []adoptRow{
		{name: "sidecar pod left to Istio", pod: sidecarPod, istio: controlplane.Sidecar,
			want: adoptWant{handled: true, outcome: istioadopt.OutcomeCaptured, istio: istioSidecar, events: []string{events.ReasonIstioCNICaptured}}},
		{name: "sidecar pod left to Istio is reported once", pod: sidecarPod, istio: controlplane.Sidecar, checks: 2,
			want: adoptWant{handled: true, istio: istioSidecar, events: []string{events.ReasonIstioCNICaptured}}},
		{name: "sidecar pod taken over", pod: sidecarPod, istio: controlplane.Sidecar, takeover: true,
			want: adoptWant{handled: true, outcome: istioadopt.OutcomeAdopted, rules: sidecar, istio: "none", events: []string{events.ReasonIstioCNIAdopted}}},
		{name: "ambient pod adopted, ztunnel keeps it", pod: ambientPod, istio: controlplane.Ambient,
			want: adoptWant{handled: true, outcome: istioadopt.OutcomeAdopted, rules: ambient, istio: "none", redirection: "enabled", ztunnel: true,
				events: []string{events.ReasonIstioCNIAdopted}}},
		{name: "ambient pod waits for ztunnel", pod: ambientPod, istio: controlplane.Ambient, noZt: true,
			want: adoptWant{handled: true, istio: istioAmbient}},
		{name: "pod istio-cni did not capture is not handled", pod: sidecarPod, takeover: true,
			want: adoptWant{istio: "none"}},
		{name: "unreadable netns is handled, never layered", pod: sidecarPod, istio: controlplane.Sidecar, takeover: true,
			fail: func(n *controlplane.Node) { n.Istio.FailDetect(broken) },
			want: adoptWant{handled: true, err: true, istio: istioSidecar, events: []string{events.ReasonCaptureRepairFailed}}},
		{name: "failed apply leaves Istio's capture", pod: sidecarPod, istio: controlplane.Sidecar, takeover: true,
			fail: func(n *controlplane.Node) { n.Kernel.Fail(redirecttest.OpApply, broken) },
			want: adoptWant{handled: true, err: true, istio: istioSidecar, events: []string{events.ReasonCaptureRepairFailed}}},
		{name: "Istio's rules stuck: sluice's taken back", pod: sidecarPod, istio: controlplane.Sidecar, takeover: true,
			fail: func(n *controlplane.Node) { n.Istio.FailRemove(broken) },
			want: adoptWant{handled: true, err: true, istio: istioSidecar, events: []string{events.ReasonCaptureRepairFailed}}},
		{name: "ambient pod Istio's rules stuck: ztunnel still holds it", pod: ambientPod, istio: controlplane.Ambient,
			fail: func(n *controlplane.Node) { n.Istio.FailRemove(broken) },
			want: adoptWant{handled: true, err: true, istio: istioAmbient, ztunnel: true, events: []string{events.ReasonCaptureRepairFailed}}},
	} {
		t.Run(r.name, func(t *testing.T) { runAdopt(t, r) })
	}
}

func runAdopt(t *testing.T, r adoptRow) {
	n := controlplane.New(t)
	n.Ztunnel.Connect(!r.noZt)
	n.Namespace(t, "app", nil)
	n.Namespace(t, "mesh", map[string]string{"istio.io/dataplane-mode": "ambient"})
	path := n.Running(t, r.pod)
	if r.istio.Found() {
		n.Istio.Program(n.Netns.Inode(path), r.istio)
	}
	if r.istio.String() == controlplane.Ambient.String() && !r.noZt {
		n.Ztunnel.Hold(string(r.pod.UID())) // for istio-cni
	}
	n.Start(t)
	if r.fail != nil {
		r.fail(n)
	}
	a, err := istioadopt.NewAdopter(istioadopt.Config{Store: n.Store, HostProc: n.Proc.Dir, Takeover: r.takeover, Kernel: n.Istio,
		Open: n.Netns.Open, ZtunnelReady: n.Ztunnel.Ready, Events: n.Events, Mesh: n.Mesh, Log: n.Log})
	if err != nil {
		t.Fatal(err)
	}
	pod := n.Cached(t, r.pod)
	d, err := n.Policy.Decide(context.Background(), policy.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)})
	if err != nil || !d.Capture {
		t.Fatalf("policy: %+v, %v", d, err)
	}
	var outcome string
	var handled bool
	for range max(r.checks, 1) {
		outcome, handled, err = a.Check(context.Background(), pod, d)
		if err != nil {
			a.Failed(pod, err, 1, time.Second) // as podcheck reports a job's failure
		}
	}
	if handled != r.want.handled || outcome != r.want.outcome || (err != nil) != r.want.err {
		t.Errorf("Check: outcome %q, handled %v, err %v; want %q, %v, an error: %v", outcome, handled, err, r.want.outcome, r.want.handled, r.want.err)
	}
	n.Flush()
	got := n.Out(t, r.pod, path)
	got.Expect(t, controlplane.Want{Rules: r.want.rules, Redirection: r.want.redirection, Ztunnel: r.want.ztunnel, Events: r.want.events})
	if wantRules := controlplane.Golden(t, r.want.rules) != ""; got.Journaled != wantRules {
		t.Errorf("journaled %v, with a ruleset wanted: %v", got.Journaled, wantRules)
	}
	if got.Istio != r.want.istio {
		t.Errorf("istio-cni's capture %q, want %q", got.Istio, r.want.istio)
	}
}
