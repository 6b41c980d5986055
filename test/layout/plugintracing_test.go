package layout

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/internal/productbuild"
)

// The plugin forwards the runtime's trace context with a hand-written check
// (plugin/tracecontext.go) and links no OpenTelemetry: the SDK's inits and
// its global state would run on every exec of every pod start. Only the
// agent traces. Listed with the product build's tags, as it ships.
func TestPluginLinksNoOpenTelemetry(t *testing.T) {
	out, err := exec.Command("go", "list", "-buildvcs=false", "-tags", productbuild.Tags, "-deps", "-f", "{{.ImportPath}}",
		"github.com/sluicemesh/sluice/plugin").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, p := range deps {
		if strings.HasPrefix(p, "go.opentelemetry.io/") {
			t.Errorf("the plugin depends on %s", p)
		}
	}
	// The list is the plugin's: it reaches the code that forwards the context.
	if !slices.Contains(deps, "github.com/sluicemesh/sluice/internal/grpccall") {
		t.Fatalf("grpccall not among the plugin's %d deps: not the real list", len(deps))
	}
}
