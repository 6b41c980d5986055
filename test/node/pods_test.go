package node

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	corev1 "k8s.io/api/core/v1"
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
