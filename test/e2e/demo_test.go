package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/internal/nstest"
)

// `make demo` is one of the README's two commands: keep it true.
func TestDemo(t *testing.T) {
	nstest.RequireRoot(t)
	out, err := exec.Command(filepath.Join(binDir, "demo"), "--bin", binDir, "--plugins", binDir).CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		"pod-a → 10.96.0.10:80 captured on :15001 (original dst 10.96.0.10:80)",
		"captured on :15006 (original dst 10.88.0.2:8080)",
		"table inet sluice",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if ns, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(ns), "sluice-demo-") {
		t.Errorf("demo left network namespaces behind:\n%s", ns)
	}
}
