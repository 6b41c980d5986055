package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The plugin runs on every pod start: it must stay thin. Kubernetes and
// nftables code belong in the agent.
func TestPluginImportsNoHeavyDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/client-go", "github.com/google/nftables", "github.com/sluicemesh/sluice/daemon"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("plugin depends on %s", dep)
			}
		}
	}
}
