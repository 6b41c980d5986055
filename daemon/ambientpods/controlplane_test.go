package ambientpods_test

import (
	"context"
	"testing"

	"github.com/sluicemesh/sluice/daemon/ambientpods"
	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/late"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/controlplane"
)

// Live enrolment over the control-plane tier (test/harness/controlplane):
// a running pod and its namespace in, a label change on either, and the
// Enroller's answer out: the pod's ruleset as nft text, the redirection
// annotation, ztunnel's hold and the Events, as uid 65534. podcheck routes
// pods here (its TestRouteScenarios covers the routing); here the
// Enroller alone meets each change.

var (
	ambientLabels = map[string]string{"istio.io/dataplane-mode": "ambient"}
	noneLabels    = map[string]string{"istio.io/dataplane-mode": "none"}
	web           = controlplane.Pod{Namespace: "app", Name: "web"}
)

type liveRow struct {
	name     string
	nsLabels map[string]string
	pod      controlplane.Pod
	// held: sluice enrolled the pod at its ADD, as policy decided then
	// (and istiod was not told: the annotation is unset).
	held   bool
	noZt   bool // ztunnel is not connected
	change func(t *testing.T, n *controlplane.Node)
	want   liveWant
}

type liveWant struct {
	err         bool
	rules       string // a controlplane golden; "" no table
	redirection string
	ztunnel     bool
	events      []string
}

func TestLiveEnrolment(t *testing.T) {
	ambient, sidecar := controlplane.GoldenAmbient, controlplane.GoldenSidecar
	enrolled := []string{events.ReasonAmbientEnrolled}
	relabel := func(labels map[string]string) func(*testing.T, *controlplane.Node) {
		return func(t *testing.T, n *controlplane.Node) { n.Relabel(t, "app", labels) }
	}
	label := func(p controlplane.Pod, labels map[string]string) func(*testing.T, *controlplane.Node) {
		return func(t *testing.T, n *controlplane.Node) { n.Update(t, p, labels, nil) }
	}
	for _, r := range []liveRow{
		{name: "namespace labelled ambient enrols", pod: web, change: relabel(ambientLabels),
			want: liveWant{rules: ambient, redirection: "enabled", ztunnel: true, events: enrolled}},
		{name: "pod labelled ambient enrols", pod: web, change: label(web, ambientLabels),
			want: liveWant{rules: ambient, redirection: "enabled", ztunnel: true, events: enrolled}},
		{name: "namespace relabelled out unenrols", nsLabels: ambientLabels, pod: web, change: relabel(noneLabels),
			want: liveWant{events: []string{events.ReasonAmbientEnrolled, events.ReasonAmbientUnenrolled}}},
		{name: "pod opted out unenrols", nsLabels: ambientLabels, pod: web, change: label(web, noneLabels),
			want: liveWant{events: []string{events.ReasonAmbientEnrolled, events.ReasonAmbientUnenrolled}}},
		{name: "ambient pod held unmarked is marked", nsLabels: ambientLabels, pod: web, held: true,
			want: liveWant{rules: ambient, redirection: "enabled", ztunnel: true}},
		{name: "ztunnel away: pending, nothing left", pod: web, noZt: true, change: relabel(ambientLabels),
			want: liveWant{err: true, redirection: "pending"}},
		{name: "sidecar pod held keeps its capture", pod: controlplane.Pod{Namespace: "app", Name: "web", Injected: true}, held: true,
			change: relabel(ambientLabels), want: liveWant{rules: sidecar}},
		{name: "plain pod stays out", pod: web, change: relabel(map[string]string{"team": "a"}),
			want: liveWant{}},
	} {
		t.Run(r.name, func(t *testing.T) { runLive(t, r) })
	}
}

func runLive(t *testing.T, r liveRow) {
	n := controlplane.New(t)
	n.Ztunnel.Connect(!r.noZt)
	n.Namespace(t, r.pod.Namespace, r.nsLabels)
	path := n.Running(t, r.pod)
	n.Start(t)
	if r.held {
		n.Enrolled(t, r.pod, path)
	}
	e := &ambientpods.Enroller{Mesh: n.Mesh, HostProc: n.Proc.Dir, Events: n.Events, Log: n.Log}
	err := check(t, n, e, r.pod)
	if r.change != nil {
		if err != nil {
			t.Fatalf("before the change: %v", err)
		}
		r.change(t, n)
		err = check(t, n, e, r.pod)
	}
	if (err != nil) != r.want.err {
		t.Errorf("error %v, want one: %v", err, r.want.err)
	}
	n.Flush()
	got := n.Out(t, r.pod, path)
	got.Expect(t, controlplane.Want{Rules: r.want.rules, Redirection: r.want.redirection, Ztunnel: r.want.ztunnel, Events: r.want.events})
}

// check hands the pod, as the agent's caches hold it, to the Enroller as
// podcheck's route does: Reconcile a pod sluice holds, Enroll one policy
// wants ambient.
func check(t *testing.T, n *controlplane.Node, e *ambientpods.Enroller, p controlplane.Pod) error {
	t.Helper()
	pod := n.Cached(t, p)
	ctx := context.Background()
	d, err := n.Policy.Decide(ctx, policy.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)})
	if err != nil {
		t.Fatal(err)
	}
	if recs := late.Records(n.Store, pod.UID); len(recs) > 0 {
		return e.Reconcile(ctx, pod, recs, d)
	}
	if d.Capture && d.Spec.Mode == redirect.ModeAmbient {
		return e.Enroll(ctx, pod, d)
	}
	return nil
}
