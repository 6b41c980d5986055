package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The plugin runs on every pod start: it must stay thin. Kubernetes and
// nftables code belong in the agent.
func TestPluginImportsNoHeavyDependencies(t *testing.T) {
	// Built as `make build` builds it (Makefile TAGS).
	out, err := exec.Command("go", "list", "-buildvcs=false", "-tags", "grpcnotrace", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/client-go", "github.com/google/nftables", "github.com/sluicemesh/sluice/daemon",
			"golang.org/x/net/trace", "html/template"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("plugin depends on %s", dep)
			}
		}
	}
}
