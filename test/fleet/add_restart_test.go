package fleet

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/fleet"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

const annRedirection = "ambient.istio.io/redirection"

// addFootprint runs the CNI ADD of a plain, a sidecar and an ambient pod on
// n's node through the real plugin, and counts what n's agent asked of the
// API server for each: a GET of a pod its cache has not seen yet at most
// (the named exception), and for the ambient pod one PATCH, the annotation.
func addFootprint(t *testing.T, env *kubetest.Env, admin kubernetes.Interface, f *fleet.Fleet, n *agentNode) {
	t.Helper()
	ctx := t.Context()
	n.ztunnel.Wait(t, 30*time.Second, func() bool { return n.ztunnel.Logs.Count("ztunnel connected") > 0 },
		"the ZDS stand-in never connected to its agent")
	for _, c := range []struct {
		name   string
		tmpl   *corev1.Pod
		writes int
	}{
		{"add-plain", &corev1.Pod{}, 0},
		{"add-sidecar", sidecarPod(), 0},
		{"add-ambient", ambientPod(), maxAmbientWrites},
	} {
		mark := len(auditOf(t, env).all)
		p, err := f.Place(ctx, fleet.Namespace(0), c.name, fleet.NodeName(n.i), c.tmpl, false)
		if err != nil {
			t.Fatal(err)
		}
		n.add(t, p)
		var reads, writes []kubetest.AuditEvent
		for _, ev := range auditOf(t, env).all[mark:] {
			switch {
			case ev.User.Username != agentUser(n.i) || ev.Verb == "watch":
			case ev.Verb == "get" && ev.Resource() == "pods":
				reads = append(reads, ev)
			case ev.Verb == "patch" && (ev.Resource() == "pods" || ev.Resource() == "pods/status"):
				// The annotation goes through pods/status, as
				// istio-cni's does (deploy/rbac/clusterrole.yaml).
				writes = append(writes, ev)
			default:
				t.Errorf("the ADD of %s asked %s %s", c.name, ev.Verb, ev.URI)
			}
		}
		t.Logf("ADD of %s: %d reads %v, %d writes %v", c.name, len(reads), uris(reads), len(writes), uris(writes))
		figure(t, "ADD of a pod "+strings.TrimPrefix(c.name, "add-"), "%d reads, %d writes", len(reads), len(writes))
		if len(reads) > maxAddReads {
			t.Errorf("the ADD of %s read %d times, want at most %d: %v", c.name, len(reads), maxAddReads, uris(reads))
		}
		if len(writes) > c.writes {
			t.Errorf("the ADD of %s wrote %d times, want at most %d: %v", c.name, len(writes), c.writes, uris(writes))
		}
		// The ambient pod was enrolled, or its count says nothing.
		got, err := admin.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := ""
		if c.writes > 0 {
			want = "enabled"
		}
		if got.Annotations[annRedirection] != want {
			t.Errorf("%s: %s = %q after its ADD, want %q", c.name, annRedirection, got.Annotations[annRedirection], want)
		}
	}
	if n.ztunnel.Logs.Count("ztunnel add", "add-ambient") != 1 {
		t.Errorf("the ZDS stand-in was not handed the ambient pod once:\n%s", n.ztunnel.Logs)
	}
}

func ambientPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}}
}

// restartStorm stops every agent and starts them all again at once, as a
// DaemonSet rollout with maxUnavailable 100 % would, and counts each new
// agent's LISTs: one per informer, pods scoped to its node, and every one
// served from the API server's watch cache (resourceVersion=0; its metric
// apiserver_storage_list_total{storage="watchcache"} counts them). How
// long the last agent took to be ready is reported, not asserted.
func restartStorm(t *testing.T, env *kubetest.Env, admin kubernetes.Interface, nodes []*agentNode, size fleet.Spec) {
	t.Helper()
	for _, n := range nodes {
		n.agent.Cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range nodes {
		n.agent.Stop(t)
	}
	cachedBefore := cacheLists(t, admin)
	mark := len(auditOf(t, env).all)
	began := time.Now()
	for _, n := range nodes {
		n.agent = n.spawn(t, env)
	}
	ready := make([]time.Duration, len(nodes))
	nstest.Eventually(t, 5*time.Minute, func() bool {
		all := true
		for i, n := range nodes {
			if ready[i] > 0 {
				continue
			}
			n.agent.Alive(t)
			if resp, err := n.Status(); err == nil && resp.Ready {
				ready[i] = time.Since(began)
			} else {
				all = false
			}
		}
		return all
	}, "every agent ready after the rollout")
	slices.Sort(ready)
	figure(t, fmt.Sprintf("rollout at %d namespaces, %d pods: time to ready", size.Namespaces, size.Pods), "median %v, slowest %v of %d agents restarted at once",
		ready[len(ready)/2].Round(time.Millisecond), ready[len(ready)-1].Round(time.Millisecond), len(nodes))

	var audit []kubetest.AuditEvent
	nstest.Eventually(t, 60*time.Second, func() bool {
		audit = auditOf(t, env).all[mark:]
		for i := range nodes {
			if !slices.ContainsFunc(audit, func(ev kubetest.AuditEvent) bool {
				return ev.User.Username == agentUser(i) && ev.Verb == "get" && ev.Resource() == "nodes"
			}) {
				return false
			}
		}
		return true
	}, "every restarted agent's look at its node's startup taint")
	lists := map[string]int{}
	var perAgent []int
	for i := range nodes {
		var mine []kubetest.AuditEvent
		perResource := map[string]int{}
		for _, ev := range audit {
			if ev.User.Username == agentUser(i) && ev.Verb == "list" {
				mine = append(mine, ev)
				perResource[ev.Resource()]++
				lists[ev.Resource()]++
			}
		}
		t.Logf("agent %d after the rollout: %d LISTs %v", i, len(mine), uris(mine))
		perAgent = append(perAgent, len(mine))
		if len(mine) > maxStartLists {
			t.Errorf("agent %d LISTed %d times in the rollout, want at most %d: %v", i, len(mine), maxStartLists, uris(mine))
		}
		for r, k := range perResource {
			if k > 1 {
				t.Errorf("agent %d LISTed %s %d times in the rollout, want once", i, r, k)
			}
		}
		for _, ev := range mine {
			if ev.Resource() == "pods" && !strings.Contains(ev.URI, "spec.nodeName") {
				t.Errorf("agent %d LISTed pods unscoped in the rollout: %s", i, ev.URI)
			}
		}
	}
	figure(t, fmt.Sprintf("rollout at %d namespaces: LISTs per agent", size.Namespaces), "%s", spread(perAgent))
	cachedAfter := cacheLists(t, admin)
	for r, k := range lists {
		served := cachedAfter[r] - cachedBefore[r]
		figure(t, fmt.Sprintf("rollout at %d namespaces: LISTs of %s", size.Namespaces, r), "%d by the agents, %d served from the watch cache", k, served)
		if served < k {
			t.Errorf("of the agents' %d LISTs of %s, only %d were served from the watch cache", k, r, served)
		}
	}
}

// cacheLists reads the API server's apiserver_storage_list_total for the
// watch cache (storage="watchcache"): LISTs it served from its cache rather
// than etcd, by resource.
func cacheLists(t *testing.T, admin kubernetes.Interface) map[string]int {
	t.Helper()
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_storage_list_total{") || !strings.Contains(line, `storage="watchcache"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `,resource="`)
		res, _, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(line)
		v, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
		out[res] += int(v)
	}
	if len(out) == 0 {
		t.Fatal("the API server's metrics hold no apiserver_storage_list_total for its watch cache")
	}
	return out
}
