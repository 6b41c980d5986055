package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/nstest"
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
		"nothing listens on 10.96.0.10",
		"uid 1337",
		"pod-b → 10.88.0.2:8080 refused",
		"pod-b (uid 1337) → 10.88.0.2:8080 captured on :15006 (original dst 10.88.0.2:8080)",
		"==> sluice-agent status",
		"ready      yes",
		"demo/pod-b  pod-b",
		"reason   namespace kube-system is excluded",
		"sluice_workloads_enrolled{mode=\"sidecar\"} 2",
		"sluice_ready 1",
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

// --keep leaves the pods and the agent up, as printed, and --teardown with
// the printed prefix removes all of it.
func TestDemoKeepAndTeardown(t *testing.T) {
	nstest.RequireRoot(t)
	demo := filepath.Join(binDir, "demo")
	out, err := exec.Command(demo, "--bin", binDir, "--plugins", binDir, "--keep").CombinedOutput()
	if err != nil {
		t.Fatalf("demo --keep: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`DEMO_ARGS="--teardown (sluice-demo-[0-9]+)"`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("demo --keep printed no teardown command:\n%s", out)
	}
	prefix := string(m[1])
	torn := false
	t.Cleanup(func() {
		if !torn {
			exec.Command(demo, "--teardown", prefix).Run()
		}
	})
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"-*"))
	if len(dirs) != 1 {
		t.Fatalf("kept dirs %v, want one", dirs)
	}
	socket := filepath.Join(dirs[0], "run", "agent.sock")
	if got, err := exec.Command(filepath.Join(binDir, "sluice-agent"), "get", "demo/pod-a", "--socket", socket).CombinedOutput(); err != nil ||
		!strings.Contains(string(got), "in sync") {
		t.Errorf("sluice-agent get on the kept demo: %v\n%s", err, got)
	}
	if got, err := exec.Command("ip", "netns", "exec", prefix+"-pod-a", "nft", "list", "table", "inet", "sluice").CombinedOutput(); err != nil {
		t.Errorf("kept pod-a has no sluice table: %v\n%s", err, got)
	}
	pidText, err := os.ReadFile(filepath.Join(dirs[0], "agent.pid"))
	if err != nil {
		t.Fatal(err)
	}
	torn = true
	if got, err := exec.Command(demo, "--teardown", prefix).CombinedOutput(); err != nil {
		t.Fatalf("demo --teardown: %v\n%s", err, got)
	}
	if ns, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(ns), prefix) {
		t.Errorf("teardown left network namespaces:\n%s", ns)
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"-*")); len(left) > 0 {
		t.Errorf("teardown left %v", left)
	}
	if _, err := os.Stat("/proc/" + strings.TrimSpace(string(pidText))); err == nil {
		t.Errorf("teardown left the agent (pid %s) running", pidText)
	}
}
