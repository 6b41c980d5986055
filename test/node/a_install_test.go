package node

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/nodetest"
)

// installed is set once the chart is in; later tests that need the agent
// install it themselves when run alone (-run).
var installed bool

// requireAgent installs the chart if no test has yet and waits for its
// agent to be Ready.
func requireAgent(t *testing.T) {
	t.Helper()
	if !installed {
		helm(t, append([]string{"install", release, "deploy/helm/sluice", "-n", releaseNS}, chartValues()...)...)
		installed = true
	}
	readyAgent(t, 2*time.Minute)
}

// The chart's DaemonSet pod becomes Ready through its own probes, the
// installer has chained sluice last into the node's primary conflist and
// put the plugin in the node's bin dir, and the agent's log is readable
// as `kubectl logs` reads it.
func TestHelmInstall(t *testing.T) {
	requireAgent(t)
	agent := readyAgent(t, time.Minute)
	if agent.Spec.NodeName != cluster.NodeName {
		t.Errorf("agent pod on node %q, want %q", agent.Spec.NodeName, cluster.NodeName)
	}
	if types := conflistTypes(t); len(types) < 2 || types[len(types)-1] != "sluice" || types[0] != "bridge" {
		t.Errorf("node conflist plugins = %v, want bridge first and sluice last", types)
	}
	if st, err := os.Stat(cluster.NodePath("/opt/cni/bin/sluice")); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("plugin in the node's /opt/cni/bin: %v (mode %v)", err, st)
	}
	eventually(t, 30*time.Second, "the agent's log", func() error {
		l := logs(t, releaseNS, agent.Name, "sluice-agent")
		if !strings.Contains(l, "msg=serving") || !strings.Contains(l, "version="+imageTag) {
			return fmt.Errorf("agent log has no serving line of version %s:\n%s", imageTag, l)
		}
		return nil
	})
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
