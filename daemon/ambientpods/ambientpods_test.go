package ambientpods

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sluicemesh/sluice/daemon/ambientmesh"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/redirection"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// Reconcile's decisions for a pod sluice holds, on the fake clientset: a
// sidecar pod is never touched; an ambient pod policy still wants gets the
// annotation when it lacks it; one policy no longer wants loses it.
func TestReconcile(t *testing.T) {
	store, err := workloads.Open(workloads.Config{Dir: t.TempDir(), Opener: redirecttest.NewNamespaces(t), Kernel: redirecttest.NewFake(),
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ambient := policy.Decision{Capture: true, Spec: redirect.DefaultAmbientSpec(), Reason: "namespace label"}
	for _, tc := range []struct {
		name      string
		rec       redirect.Spec
		annotated string
		d         policy.Decision
		want      string // the annotation patched, "-" none, "null" removed
	}{
		{"sidecar", redirect.DefaultSpec(), "", policy.Decision{Reason: "opted out"}, "-"},
		{"ambient, unmarked", redirect.DefaultAmbientSpec(), "", ambient, `"enabled"`},
		{"ambient, marked", redirect.DefaultAmbientSpec(), "enabled", ambient, "-"},
		{"no longer ambient", redirect.DefaultAmbientSpec(), "enabled", policy.Decision{Reason: "dataplane-mode=none"}, "null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "u-1"}}
			if tc.annotated != "" {
				pod.Annotations = map[string]string{redirection.Annotation: tc.annotated}
			}
			client := fake.NewClientset(pod)
			e := &Enroller{Mesh: &ambientmesh.Mesh{Store: store, Redirection: redirection.New(client, slog.New(slog.DiscardHandler))}, Log: slog.New(slog.DiscardHandler)}
			recs := []workloads.Record{{Attachment: workloads.Attachment{ContainerID: "c1", IfName: "eth0"}, PodUID: "u-1", Spec: tc.rec}}
			if err := e.Reconcile(context.Background(), pod, recs, tc.d); err != nil {
				t.Fatal(err)
			}
			got := "-"
			for _, a := range client.Actions() {
				if p, ok := a.(k8stesting.PatchAction); ok {
					got = string(p.GetPatch())
				}
			}
			if tc.want == "-" && got != "-" || tc.want != "-" && !strings.Contains(got, `"`+redirection.Annotation+`":`+tc.want) {
				t.Errorf("patch %s, want the annotation %s", got, tc.want)
			}
		})
	}
}
