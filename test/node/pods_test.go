package node

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Istio metadata istiod's injector writes in CNI mode, and a
// destination nothing on the node routes (nodetest's).
const (
	annStatus   = nodetest.AnnSidecarStatus
	statusVal   = nodetest.SidecarStatus
	proxyUID    = nodetest.ProxyUID
	unreachable = nodetest.Unreachable
)

// plainPod is an uninjected application pod (nodetest's PlainPod).
func plainPod(name, dial string) *corev1.Pod { return images.PlainPod(name, dial) }

// sidecarPod is nodetest's SidecarPod with more annotations.
func sidecarPod(name, dial string, annotations map[string]string) *corev1.Pod {
	p := images.SidecarPod(name, dial)
	for k, v := range annotations {
		p.Annotations[k] = v
	}
	return p
}

// createPod creates p on the node under test (cluster.NodeName), whose
// files, netns and agent the tests read; the other node is there for the
// cluster's sake (the node lifecycle controller evicts only while another
// node is Ready).
func createPod(t *testing.T, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: cluster.NodeName}
	}
	got, err := client(t).CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, p.Name, err)
	}
	return got
}

func getPod(t testing.TB, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := client(t).CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return p
}

// runningPod waits until every container of the pod runs and returns it.
func runningPod(t testing.TB, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	nodetest.Eventually(t, timeout, "pod "+ns+"/"+name+" Running", func() error {
		p = getPod(t, ns, name)
		if p.Status.PodIP == "" {
			return fmt.Errorf("%s, no pod IP", nodetest.PodState(p))
		}
		return isRunning(p)
	})
	return p
}

// logShows waits until the container's log has a line containing every
// one of parts.
func logShows(t testing.TB, ns, pod, container string, timeout time.Duration, parts ...string) {
	t.Helper()
	nodetest.Eventually(t, timeout, fmt.Sprintf("%s/%s[%s] to log %q", ns, pod, container, parts), func() error {
		l := logs(t, ns, pod, container)
		for _, line := range strings.Split(l, "\n") {
			if containsAll(line, parts) {
				return nil
			}
		}
		return fmt.Errorf("log:\n%s", tailLines(l, 10))
	})
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// record is the agent's journal record of a pod, read from the node's
// /var/run/sluice/state.
type record struct {
	file  string
	Netns string
}

// journalRecords are the agent's records naming the pod's uid.
func journalRecords(t testing.TB, uid string) []record {
	t.Helper()
	dir := cluster.NodePath("/run/sluice/state")
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var out []record
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), uid) {
			continue
		}
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatalf("journal record %s: %v", f, err)
		}
		out = append(out, record{file: f, Netns: findString(raw, "netns", "Netns", "NetnsPath", "netns_path", "netnsPath")})
	}
	return out
}

// findString finds the first string value under any of keys, anywhere in v.
func findString(v any, keys ...string) string {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range keys {
			if s, ok := x[k].(string); ok && s != "" {
				return s
			}
		}
		for _, e := range x {
			if s := findString(e, keys...); s != "" {
				return s
			}
		}
	case []any:
		for _, e := range x {
			if s := findString(e, keys...); s != "" {
				return s
			}
		}
	}
	return ""
}

// sluiceTable is the pod netns's sluice table as nft lists it, or the
// error.
func sluiceTable(netns string) (string, error) {
	out, err := exec.Command("nsenter", "--net="+cluster.NodePath(netns), "nft", "list", "table", "inet", "sluice").CombinedOutput()
	return string(out), err
}
