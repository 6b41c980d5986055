package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
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

// Interrupted half way, the demo still removes everything it made.
func TestDemoCleansUpWhenInterrupted(t *testing.T) {
	nstest.RequireRoot(t)
	cmd := exec.Command(filepath.Join(binDir, "demo"), "--bin", binDir, "--plugins", binDir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("sluice-demo-%d-", cmd.Process.Pid)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		// Interrupt once pods exist and the chain is running.
		if strings.Contains(sc.Text(), "CNI ADD pod-a") {
			cmd.Process.Signal(os.Interrupt)
			break
		}
	}
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err == nil {
		t.Fatal("interrupted demo exited 0")
	}
	if ns, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(ns), prefix) {
		t.Errorf("interrupted demo left network namespaces:\n%s", ns)
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*")); len(left) > 0 {
		t.Errorf("interrupted demo left %v", left)
	}
}
