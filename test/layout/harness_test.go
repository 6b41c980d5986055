package layout

import (
	"os/exec"
	"strings"
	"testing"
)

// The shipped binaries are built from the product alone: nothing under
// test/ (the harness's home) is in the dependency closure of the agent or
// the plugin, so no test support can reach a node.
func TestShippedBinariesImportNoHarness(t *testing.T) {
	out, err := exec.Command("go", "list", "-buildvcs=false", "-deps", "-f", "{{.ImportPath}}",
		"github.com/sluicemesh/sluice/daemon", "github.com/sluicemesh/sluice/plugin").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	own := 0
	for _, p := range deps {
		rel, ok := strings.CutPrefix(p, "github.com/sluicemesh/sluice/")
		if !ok {
			continue
		}
		own++
		if strings.HasPrefix(rel, "test/") || strings.HasSuffix(rel, "test") {
			t.Errorf("the shipped binaries depend on %s, test support", p)
		}
	}
	if own < 20 {
		t.Fatalf("only %d of the project's packages in the binaries' closure: not the real list", own)
	}
}
