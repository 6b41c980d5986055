package peer

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/nodetest"
)

// installed is set once the chart is in; later tests install it
// themselves when run alone (-run).
var installed bool

// requireAgent installs Istio's istio-cni chart, sidecar mode only (ambient
// off), with the image built from the pinned Istio module and the node's
// CNI directories, and waits for its DaemonSet pod to be Ready.
func requireAgent(t *testing.T) {
	t.Helper()
	if !installed {
		helm(t, "install", release, istioChart(t), "-n", releaseNS, "--create-namespace",
			"--set", "image="+istioCNIImage,
			"--set", "pullPolicy=Never",
			"--set", "cniBinDir=/opt/cni/bin",
			"--set", "cniConfDir=/etc/cni/net.d",
			"--set", "ambient.enabled=false")
		installed = true
	}
	readyAgent(t, 2*time.Minute)
}

// Istio's chart runs install-cni on the node: its pod becomes Ready through
// the chart's own probe, istio-cni is chained last into the node's primary
// conflist, and the plugin is in the node's bin dir.
func TestIstioCNIInstall(t *testing.T) {
	start := time.Now()
	requireAgent(t)
	t.Logf("istio-cni Ready %.1fs after helm install", time.Since(start).Seconds())
	eventually(t, 30*time.Second, "istio-cni chained last", func() error {
		if types := conflistTypes(t); len(types) < 2 || types[0] != "bridge" || types[len(types)-1] != "istio-cni" {
			return fmt.Errorf("node conflist plugins = %v, want bridge first and istio-cni last", types)
		}
		return nil
	})
	if st, err := os.Stat(cluster.NodePath("/opt/cni/bin/istio-cni")); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("plugin in the node's /opt/cni/bin: %v (mode %v)", err, st)
	}
}

// conflistTypes are the plugin types of the node's primary conflist, in
// order.
func conflistTypes(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(cluster.ConfDir(nodetest.PrimaryConflist))
	if err != nil {
		t.Fatalf("read node conflist: %v", err)
	}
	var conf struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatalf("parse node conflist: %v\n%s", err, b)
	}
	var types []string
	for _, p := range conf.Plugins {
		types = append(types, p.Type)
	}
	return types
}
