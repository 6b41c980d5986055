package rpc_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/rpc"
	"github.com/sluicemesh/sluice/test/harness/controlplane"
)

// The CNI ADD over the control-plane tier (test/harness/controlplane): the
// pod and its namespace in, rpc.CNI built over the Node's parts as the
// agent builds it (policy, store, Events, the ambient owner), an ADD
// request as the plugin sends it, and out the answer, the sandbox's
// ruleset as nft text, the redirection annotation, ztunnel's hold and the
// Events, as uid 65534. cni_test.go runs the ADD on real netns as root.

type addRow struct {
	name     string
	pod      controlplane.Pod
	ztunnel  string // "" connected; "away": gone, --ztunnel-wait 0; "late": connects while the ADD waits
	want     addWant
	wantCode codes.Code
}

type addWant struct {
	mode        sluicev1.Mode // MODE_UNSPECIFIED: passed through or refused
	rules       string        // a controlplane golden; "" no table
	redirection string
	ztunnel     bool
	events      []string
}

func TestCNIAdd(t *testing.T) {
	sidecar, ambient := controlplane.GoldenSidecar, controlplane.GoldenAmbient
	meshPod := controlplane.Pod{Namespace: "mesh", Name: "web"}
	for _, r := range []addRow{
		{name: "sidecar pod captured", pod: controlplane.Pod{Namespace: "app", Name: "web", Injected: true},
			want: addWant{mode: sluicev1.Mode_MODE_SIDECAR, rules: sidecar}},
		{name: "ambient pod enrolled and marked", pod: meshPod,
			want: addWant{mode: sluicev1.Mode_MODE_AMBIENT, rules: ambient, redirection: "enabled", ztunnel: true}},
		{name: "ambient pod waits for a ztunnel that comes", pod: meshPod, ztunnel: "late",
			want: addWant{mode: sluicev1.Mode_MODE_AMBIENT, rules: ambient, redirection: "enabled", ztunnel: true}},
		{name: "ambient pod refused without ztunnel is pending", pod: meshPod, ztunnel: "away", wantCode: codes.Unavailable,
			want: addWant{redirection: "pending", events: []string{events.ReasonCaptureFailed}}},
		{name: "plain pod passed through", pod: controlplane.Pod{Namespace: "app", Name: "web"},
			want: addWant{}},
		{name: "excluded namespace passed through", pod: controlplane.Pod{Namespace: controlplane.ExcludedNamespace, Name: "dns", Injected: true},
			want: addWant{}},
	} {
		t.Run(r.name, func(t *testing.T) { runAdd(t, r) })
	}
}

func runAdd(t *testing.T, r addRow) {
	n := controlplane.New(t)
	n.Ztunnel.Connect(r.ztunnel == "")
	if r.ztunnel == "away" {
		n.Ztunnel.NoWait()
	}
	n.Namespace(t, "app", nil)
	n.Namespace(t, "mesh", map[string]string{"istio.io/dataplane-mode": "ambient"})
	n.Namespace(t, controlplane.ExcludedNamespace, nil)
	n.Created(t, r.pod)
	n.Start(t)
	n.Cached(t, r.pod)
	// As the agent builds it (daemon/agent.go buildCNI).
	cni := &rpc.CNI{Policy: n.Policy, Workloads: n.Store, Ready: func() (bool, string) { return true, "" }, Inflight: rpc.NewInflight(4),
		Events: n.Events, Ambient: n.Mesh}
	path, ip := n.Sandbox(t, r.pod)
	req := &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2, ContainerId: "sandbox-1", Netns: path, IfName: "eth0",
		Pod: &sluicev1.PodRef{Namespace: r.pod.Namespace, Name: r.pod.Name, Uid: string(r.pod.UID())},
		Ips: []*sluicev1.IPConfig{{Address: ip.String() + "/24"}}, Config: &sluicev1.PluginConfig{NetworkName: "k8s-pod-network"}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the plugin's deadline
	defer cancel()
	type answer struct {
		resp *sluicev1.AddResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := cni.Add(ctx, req)
		done <- answer{resp, err}
	}()
	if r.ztunnel == "late" {
		n.Eventually(t, func() bool { return n.Ztunnel.Waiting() > 0 }, "the ADD never waited for ztunnel")
		n.Ztunnel.Connect(true)
	}
	a := <-done
	if status.Code(a.err) != r.wantCode {
		t.Errorf("ADD: %v, want code %v", a.err, r.wantCode)
	}
	if a.resp.GetMode() != r.want.mode || a.resp.GetEnrolled() != (r.want.mode != sluicev1.Mode_MODE_UNSPECIFIED) {
		t.Errorf("ADD answered %v, want mode %v", a.resp, r.want.mode)
	}
	n.Flush()
	got := n.Out(t, r.pod, path)
	got.Expect(t, controlplane.Want{Rules: r.want.rules, Redirection: r.want.redirection, Ztunnel: r.want.ztunnel, Events: r.want.events})
	if wantRules := controlplane.Golden(t, r.want.rules) != ""; got.Journaled != wantRules {
		t.Errorf("journaled %v, with a ruleset wanted: %v", got.Journaled, wantRules)
	}
}
