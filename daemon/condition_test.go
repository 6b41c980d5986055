package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sluicemesh/sluice/daemon/health"
	"github.com/sluicemesh/sluice/daemon/nodecondition"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// The condition names what is missing: the first failing check's reason,
// every failing check and ztunnel in the message; True only when nothing
// is.
func TestMeshStateNamesWhatIsMissing(t *testing.T) {
	ready := func() ([]string, string) { return nil, "" }
	noZtunnel := func() (bool, string) { return false, "no ztunnel connected on /var/run/ztunnel/ztunnel.sock" }
	for _, tc := range []struct {
		name    string
		failing func() ([]string, string)
		ztunnel func() (bool, string)
		ok      bool
		reason  string
		message []string
	}{
		{"ready, sidecar only", ready, nil, true, "MeshReady", []string{"socket serving"}},
		{"ready, ztunnel connected", ready, func() (bool, string) { return true, "" }, true, "MeshReady", []string{"ztunnel connected"}},
		{"entry missing", func() ([]string, string) { return []string{"installer"}, "installer: conflist entry missing" }, nil,
			false, "PluginNotInstalled", []string{"installer: conflist entry missing"}},
		{"socket down and entry missing", func() ([]string, string) {
			return []string{"grpc", "installer"}, "grpc: socket refused; installer: entry missing"
		}, nil, false, "AgentNotServing", []string{"grpc: socket refused", "installer: entry missing"}},
		{"no verdict yet", func() ([]string, string) { return nil, "not checked yet" }, nil, false, "AgentNotReady", []string{"not checked yet"}},
		{"ready but no ztunnel", ready, noZtunnel, false, "ZtunnelNotConnected", []string{"ztunnel: no ztunnel connected"}},
		{"caches and ztunnel", func() ([]string, string) { return []string{"policy"}, "policy: not synced" }, noZtunnel,
			false, "CachesNotSynced", []string{"policy: not synced", "ztunnel: no ztunnel"}},
		{"a check not listed", func() ([]string, string) { return []string{"new-check"}, "new-check: no" }, nil, false, "AgentNotReady", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := meshState(tc.failing, tc.ztunnel)()
			if got.OK != tc.ok || got.Reason != tc.reason {
				t.Errorf("state = %+v, want ok=%v reason %s", got, tc.ok, tc.reason)
			}
			for _, m := range tc.message {
				if !strings.Contains(got.Message, m) {
					t.Errorf("message %q does not name %q", got.Message, m)
				}
			}
		})
	}
	long := func() ([]string, string) { return []string{"installer"}, strings.Repeat("x", 4000) }
	if got := meshState(long, nil)(); len(got.Message) > maxMessage {
		t.Errorf("message of %d bytes, want at most %d", len(got.Message), maxMessage)
	}
}

// Every check the agent adds (read off its source) has its own reason: a
// check added or renamed without one would read as the vague AgentNotReady.
func TestEveryCheckHasAReason(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	added := regexp.MustCompile(`checks\.Add(?:Liveness)?\("([^"]+)"`)
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range added.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
	}
	if len(names) < 5 {
		t.Fatalf("found only the checks %v in the agent's source", names)
	}
	for _, name := range names {
		if checkReasons[name] == "" {
			t.Errorf("check %q has no condition reason in checkReasons", name)
		}
	}
}

// The part follows the verdict while it runs; stop ends the publisher and
// then writes AgentStopping, which nothing overwrites afterwards.
func TestConditionPartStopsThenSaysStopping(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	c := fake.NewClientset(node)
	// The API server refuses the fence's dry run as the chart's policy does.
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if len(a.(k8stesting.PatchActionImpl).GetPatchOptions().DryRun) == 0 {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1",
			errors.New("ValidatingAdmissionPolicy 'p' with binding 'p' denied request: "+nodecondition.FenceDenial))
	})
	checks := &health.Checks{}
	checks.Add("grpc", func() (bool, string) { return true, "" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go checks.Run(ctx, 10*time.Millisecond)
	run, stopRun := context.WithCancel(ctx)
	p := &conditionPart{pub: &nodecondition.Publisher{Client: c, Node: "n1", Type: "sluice.dev/MeshReady",
		Want: meshState(checks.Failing, nil), Wake: checks.Published, Refresh: time.Hour, Retry: time.Millisecond,
		MaxBackoff: time.Millisecond, Timeout: 5 * time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		run: run, cancel: stopRun, done: make(chan struct{})}
	if err := p.start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	condition := func() corev1.NodeCondition {
		n, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cd := range n.Status.Conditions {
			if cd.Type == "sluice.dev/MeshReady" {
				return cd
			}
		}
		return corev1.NodeCondition{}
	}
	nstest.Eventually(t, 5*time.Second, func() bool { return condition().Status == corev1.ConditionTrue }, "condition True")
	p.stop(false, false)
	if got := condition(); got.Status != corev1.ConditionFalse || got.Reason != nodecondition.ReasonStopping {
		t.Fatalf("after stop: %+v, want False %s", got, nodecondition.ReasonStopping)
	}
	// The checks still say ready and keep publishing: nothing writes True.
	patches := len(c.Actions())
	for range 3 {
		<-checks.Published()
	}
	if got := condition(); got.Status != corev1.ConditionFalse || len(c.Actions()) != patches+1 {
		t.Errorf("after more verdicts: %+v, %d more API calls (want only this test's read)", got, len(c.Actions())-patches)
	}
	p.stop(false, true) // the drained stop does nothing more
}
