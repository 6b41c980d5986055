package podcheck

import (
	"context"
	"slices"
	"testing"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/istioadopt"
	"github.com/sluicemesh/sluice/daemon/repair"
	"github.com/sluicemesh/sluice/test/harness/controlplane"
)

// The routing order over the control-plane tier (test/harness/controlplane):
// pods and namespaces in, as uid 65534 in milliseconds; each pod's
// ruleset as nft text, istio-cni's capture, its annotation, its Events and
// ztunnel's hold out. The order is the safety rule of the package doc: a
// pod sluice holds is never adopted or repaired, a pod istio-cni captures
// is never given a second ruleset by repair or live enrolment. The root
// tests beside this one (adopt_test.go, modes_test.go, repair_test.go)
// run the same jobs on a real API server and real netns.

var (
	ambientNS = map[string]string{"istio.io/dataplane-mode": "ambient"}
	sidecarP  = controlplane.Pod{Namespace: "app", Name: "web", Injected: true}
	plainP    = controlplane.Pod{Namespace: "app", Name: "web"}
)

// routeRow is one scenario: objects in, an optional event, state out.
type routeRow struct {
	name     string
	mode     string // --repair-mode; "" is off
	takeover bool   // --istio-takeover
	nsLabels map[string]string
	pod      controlplane.Pod
	istio    istioadopt.Capture // istio-cni's capture left in the pod's netns
	held     bool               // sluice enrolled the pod as policy decides
	noZt     bool               // ztunnel is not connected at start
	then     func(t *testing.T, n *controlplane.Node)
	want     routeWant
}

type routeWant struct {
	rules       string // sluice's table: a controlplane golden ("" none)
	istio       string // istio-cni's capture, "none" gone
	redirection string
	events      []string
	ztunnel     bool
}

func TestRouteScenarios(t *testing.T) {
	sidecar, ambient := controlplane.GoldenSidecar, controlplane.GoldenAmbient
	istioSidecar, istioAmbient := controlplane.Sidecar.String(), controlplane.Ambient.String()
	for _, r := range []routeRow{
		{name: "uncaptured sidecar pod, repair applies", mode: repair.ModeApply, pod: sidecarP,
			want: routeWant{rules: sidecar, istio: "none", events: []string{events.ReasonCaptureRepaired}}},
		{name: "uncaptured sidecar pod, repair off reports", pod: sidecarP,
			want: routeWant{istio: "none", events: []string{events.ReasonUncaptured}}},
		{name: "istio-cni's sidecar pod is left to Istio before repair", mode: repair.ModeApply, pod: sidecarP, istio: controlplane.Sidecar,
			want: routeWant{istio: istioSidecar, events: []string{events.ReasonIstioCNICaptured}}},
		{name: "istio-cni's sidecar pod taken over", mode: repair.ModeApply, takeover: true, pod: sidecarP, istio: controlplane.Sidecar,
			want: routeWant{rules: sidecar, istio: "none", events: []string{events.ReasonIstioCNIAdopted}}},
		{name: "istio-cni's ambient pod adopted before live enrolment", nsLabels: ambientNS, pod: plainP, istio: controlplane.Ambient,
			want: routeWant{rules: ambient, istio: "none", redirection: "enabled", events: []string{events.ReasonIstioCNIAdopted}, ztunnel: true}},
		{name: "istio-cni's ambient pod waits for ztunnel", nsLabels: ambientNS, pod: plainP, istio: controlplane.Ambient, noZt: true,
			want: routeWant{istio: istioAmbient}},
		{name: "istio-cni's ambient pod adopted once ztunnel connects", nsLabels: ambientNS, pod: plainP, istio: controlplane.Ambient, noZt: true,
			then: func(t *testing.T, n *controlplane.Node) { n.Ztunnel.Connect(true) },
			want: routeWant{rules: ambient, istio: "none", redirection: "enabled", events: []string{events.ReasonIstioCNIAdopted}, ztunnel: true}},
		{name: "ambient pod enrolled live", nsLabels: ambientNS, pod: plainP,
			want: routeWant{rules: ambient, istio: "none", redirection: "enabled", events: []string{events.ReasonAmbientEnrolled}, ztunnel: true}},
		{name: "ambient pod ztunnel refuses is pending", nsLabels: ambientNS, pod: plainP, noZt: true,
			want: routeWant{istio: "none", redirection: "pending", events: []string{events.ReasonCaptureRepairFailed}}},
		{name: "pod labelled ambient is enrolled", pod: plainP,
			then: func(t *testing.T, n *controlplane.Node) { n.Update(t, plainP, ambientNS, nil) },
			want: routeWant{rules: ambient, istio: "none", redirection: "enabled", events: []string{events.ReasonAmbientEnrolled}, ztunnel: true}},
		{name: "namespace relabelled out of ambient unenrols", nsLabels: ambientNS, pod: plainP,
			then: func(t *testing.T, n *controlplane.Node) {
				n.Relabel(t, "app", map[string]string{"istio.io/dataplane-mode": "none"})
			},
			want: routeWant{istio: "none", events: []string{events.ReasonAmbientEnrolled, events.ReasonAmbientUnenrolled}}},
		{name: "a pod sluice holds is never adopted", takeover: true, pod: sidecarP, istio: controlplane.Sidecar, held: true,
			want: routeWant{rules: sidecar, istio: istioSidecar}},
		{name: "plain pod is left alone", mode: repair.ModeApply, pod: plainP,
			want: routeWant{istio: "none"}},
		{name: "excluded namespace is left alone", mode: repair.ModeApply,
			pod:  controlplane.Pod{Namespace: controlplane.ExcludedNamespace, Name: "dns", Injected: true},
			want: routeWant{istio: "none"}},
	} {
		t.Run(r.name, func(t *testing.T) { runRoute(t, r) })
	}
}

func runRoute(t *testing.T, r routeRow) {
	n := controlplane.New(t)
	n.Ztunnel.Connect(!r.noZt)
	n.Namespace(t, r.pod.Namespace, r.nsLabels)
	path := n.Running(t, r.pod)
	if r.istio.Found() {
		n.Istio.Program(n.Netns.Inode(path), r.istio)
	}
	n.Start(t)
	if r.held {
		n.Enrolled(t, r.pod, path)
	}
	c, checked, stop := runChecker(t, n, r)
	waitSwept(t, c)
	waitChecked(t, checked, r.pod.Key())
	if r.then != nil {
		r.then(t, n)
		waitChecked(t, checked, r.pod.Key())
	}
	want := r.want
	wantRules := controlplane.Golden(t, want.rules)
	// A later check (after the Checker's own annotation patch, or the
	// event) may still be on its way: wait for the kernel and annotation
	// to settle on what the row wants, then stop and read everything.
	var last controlplane.State
	n.Eventually(t, func() bool {
		last = n.Out(t, r.pod, path)
		return last.Ruleset == wantRules && last.Redirection == want.redirection
	}, "pod %s never reached the wanted ruleset and annotation %q: %+v", r.pod.Key(), want.redirection, &last)
	stop()
	n.Flush()
	got := n.Out(t, r.pod, path)
	if got.Ruleset != wantRules {
		t.Errorf("ruleset:\n%s\nwant:\n%s", got.Ruleset, wantRules)
	}
	if got.Istio != want.istio {
		t.Errorf("istio-cni's capture %q, want %q", got.Istio, want.istio)
	}
	if got.Redirection != want.redirection {
		t.Errorf("redirection annotation %q, want %q", got.Redirection, want.redirection)
	}
	if !slices.Equal(slices.Compact(got.Events), want.events) {
		t.Errorf("events %v, want %v", got.Events, want.events)
	}
	if got.Ztunnel != want.ztunnel {
		t.Errorf("ztunnel holds the pod: %v, want %v", got.Ztunnel, want.ztunnel)
	}
	if got.Journaled != (wantRules != "") {
		t.Errorf("journaled %v with ruleset %q", got.Journaled, wantRules)
	}
}

// runChecker runs a Checker over n's parts; stop ends it and waits.
func runChecker(t *testing.T, n *controlplane.Node, r routeRow) (*Checker, <-chan string, func()) {
	t.Helper()
	mode := r.mode
	if mode == "" {
		mode = repair.ModeOff
	}
	c, err := New(Config{Policy: n.Policy, Pods: n.Cache.Pods, Namespaces: n.Cache.Namespaces, Store: n.Store, Client: n.Client,
		Events: n.Events, HostProc: n.Proc.Dir, Mode: mode, Label: repair.DefaultLabel, NodeName: controlplane.NodeName, Log: n.Log,
		IstioTakeover: r.takeover, IstioCNI: n.Istio, IstioOpen: n.Netns.Open, ZtunnelReady: n.Ztunnel.Ready, Mesh: n.Mesh})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	c.onChecked = func(key string) {
		select {
		case ch <- key:
		default:
		}
	}
	ctx, cancel := context.WithCancel(n.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var stopped bool
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return c, ch, stop
}
