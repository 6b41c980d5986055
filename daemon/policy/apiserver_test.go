//go:build !noapiserver

// The real kube-apiserver tier: compiled out by -tags noapiserver, which
// the non-root unit run uses (it ran as root in the same `make test`).
// What stays here needs a real server: the agent's ClusterRole is enough
// for every call the policy makes, the pod watch is filtered to this node
// by the server, a watch's timing, and the server going away and back.

package policy

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
)

const (
	// agent is the identity the policy runs as in these tests: bound to
	// deploy/rbac/clusterrole.yaml and nothing else.
	agent    = "sluice-agent"
	rbacFile = "../../deploy/rbac/clusterrole.yaml"
)

// shared starts the API server on first use, with the agent bound to its
// shipped ClusterRole.
var shared = &kubetest.Shared{User: agent, RBACFile: rbacFile}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Stop()
	os.Exit(code)
}

// kube returns the shared Env and an admin client, starting the API server
// and granting the agent its ClusterRole on first call.
func kube(t *testing.T) (*kubetest.Env, kubernetes.Interface) {
	t.Helper()
	testEnv := shared.Get(t)
	return testEnv, kubernetes.NewForConfigOrDie(testEnv.AdminConfig())
}

// startPolicy runs a Kube policy as the agent's user until t ends, and
// waits for its caches.
func startPolicy(t *testing.T, lookupWait time.Duration) *Kube {
	t.Helper()
	e, _ := kube(t)
	return runPolicy(t, kubernetes.NewForConfigOrDie(e.Config(agent)), lookupWait)
}

// An ADD right after the pod was created: the watch may not have delivered
// it yet; Decide must still find it.
func TestKubeDecideRightAfterCreate(t *testing.T) {
	k := startPolicy(t, time.Second)
	_, c := kube(t)
	ns := namespace(t, c, nil)
	for i := range 5 {
		pod := injected(func(p *corev1.Pod) { p.Name = "fresh-" + string(rune('a'+i)) })
		d, err := decide(t, k, createPod(t, c, ns, node, pod))
		if err != nil {
			t.Fatal(err)
		}
		if !d.Capture {
			t.Errorf("passed through: %s", d.Reason)
		}
	}
}

// A pod that appears only while Decide waits is found through the watch:
// the lookup wait is longer than the test's deadline, so the direct GET
// cannot be what finds it.
func TestKubeDecideWaitsForWatch(t *testing.T) {
	k := startPolicy(t, time.Hour)
	_, c := kube(t)
	ns := namespace(t, c, nil)
	type result struct {
		d   Decision
		err error
	}
	res := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		d, err := k.Decide(ctx, Pod{Namespace: ns, Name: "late"})
		res <- result{d, err}
	}()
	// Decide is waiting (or about to): nothing of that name exists yet.
	createPod(t, c, ns, node, injected(func(p *corev1.Pod) { p.Name = "late" }))
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.d.Capture {
		t.Errorf("passed through: %s", r.d.Reason)
	}
}

// A pod the cache never holds (another node's) is found by the direct GET
// after the lookup wait.
func TestKubeDecideFallsBackToGet(t *testing.T) {
	k := startPolicy(t, 100*time.Millisecond)
	_, c := kube(t)
	p := createPod(t, c, namespace(t, c, nil), otherNode, injected(nil))
	d, err := decide(t, k, p)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Capture {
		t.Errorf("passed through: %s", d.Reason)
	}
}

// With the API server down, pods already cached are still decided; a pod
// that is not fails with an error that says the API server could not be
// reached. Once it is back, the same pod works.
func TestKubeAPIServerRestart(t *testing.T) {
	k := startPolicy(t, 100*time.Millisecond)
	e, c := kube(t)
	ns := namespace(t, c, nil)
	cached := createPod(t, c, ns, node, injected(func(p *corev1.Pod) { p.Name = "cached" }))
	uncached := createPod(t, c, ns, otherNode, injected(func(p *corev1.Pod) { p.Name = "uncached" }))
	if _, err := decide(t, k, cached); err != nil {
		t.Fatal(err)
	}

	e.StopAPIServer()
	restarted := false
	t.Cleanup(func() {
		// Leave a running API server for the tests after this one.
		if !restarted {
			if err := e.StartAPIServer(); err != nil {
				t.Errorf("restart kube-apiserver: %v", err)
			}
		}
	})
	if _, err := decide(t, k, cached); err != nil {
		t.Errorf("cached pod with the API server down: %v", err)
	}
	_, err := decide(t, k, uncached)
	if err == nil {
		t.Fatal("uncached pod with the API server down: no error")
	}
	for _, s := range []string{ns + "/uncached", "API server", "connection refused"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}

	if err := e.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	if _, err := decide(t, k, uncached); err != nil {
		t.Errorf("after restart: %v", err)
	}
}

// A pod of an ambient namespace the cache does not have yet is enrolled:
// the namespace is read from the API server, as istio-cni's plugin reads
// it. Decided as unlabelled, the pod would start outside the mesh.
func TestKubeNamespaceMissingFromCacheIsFetched(t *testing.T) {
	e, admin := kube(t)
	agentClient := kubernetes.NewForConfigOrDie(e.Config(agent))
	k := staleNamespaces(t, agentClient)
	ns := namespace(t, admin, map[string]string{labelDataplaneMode: "ambient"})
	plain := injected(nil)
	delete(plain.Annotations, annSidecarStatus)
	d, err := decide(t, k, createPod(t, admin, ns, node, plain))
	if err != nil {
		t.Fatalf("ADD of a pod whose namespace the cache lacks: %v", err)
	}
	if !d.Capture || d.Spec.Mode != redirect.ModeAmbient {
		t.Errorf("decision capture=%v mode %q (%s): want ambient, the namespace's label", d.Capture, d.Spec.Mode, d.Reason)
	}
}
