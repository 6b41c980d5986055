package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// grpcurl is built once from the module proxy into the cache outside the
// repo, keyed by version.
const grpcurlVersion = "v1.9.3"

func grpcurl(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("SLUICE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, ".cache", "sluice")
	}
	dir := filepath.Join(cache, "tools", "grpcurl-"+grpcurlVersion)
	bin := filepath.Join(dir, "grpcurl")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	cmd := exec.Command("go", "install", "github.com/fullstorydev/grpcurl/cmd/grpcurl@"+grpcurlVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build grpcurl: %v\n%s", err, out)
	}
	return bin
}

// Operators debug the agent with the real grpcurl: reflection lists every
// service, and each Debug method answers.
func TestGrpcurl(t *testing.T) {
	bin := grpcurl(t)
	n := newNode(t)
	n.startAgent()
	c := n.cni(n.loopbackChain("2s"))
	pod := n.Pod("g1")
	if _, err := c.Add(rt("grpc1", pod)); err != nil {
		t.Fatal(err)
	}
	// grpcurl 1.9.2 and 1.9.3 ignore -unix (fullstorydev/grpcurl#496);
	// the unix:// address works in every recent version.
	run := func(args ...string) string {
		t.Helper()
		args = append(append([]string{"-plaintext"}, args[:len(args)-1]...), "unix://"+n.Socket, args[len(args)-1])
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	list := run("list")
	for _, svc := range []string{"sluice.v1.CNI", "sluice.v1.Debug", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !strings.Contains(list, svc) {
			t.Errorf("grpcurl list lacks %s:\n%s", svc, list)
		}
	}
	for _, tc := range []struct{ method, body, want string }{
		{"sluice.v1.Debug/ListWorkloads", `{}`, `"containerId": "grpc1"`},
		{"sluice.v1.Debug/GetWorkload", `{"container_id":"grpc1"}`, `table inet sluice`},
		{"sluice.v1.Debug/Version", `{}`, `"apiVersion": "API_VERSION_2"`},
		{"sluice.v1.Debug/Explain", `{"pod":{"namespace":"default","name":"x"}}`, `redirect to :15001`},
		{"grpc.health.v1.Health/Check", `{}`, `"SERVING"`},
	} {
		if out := run("-d", tc.body, tc.method); !strings.Contains(out, tc.want) {
			t.Errorf("%s: output lacks %q:\n%s", tc.method, tc.want, out)
		}
	}
}

// The built-in CLI answers the common checks with no extra tool.
func TestAgentCLI(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	c := n.cni(n.loopbackChain("2s"))
	pod := n.Pod("cli")
	if _, err := c.Add(rt("cli1", pod)); err != nil {
		t.Fatal(err)
	}
	agentCLI := func(cmd string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(binDir, "sluice-agent"), cmd, "--socket", n.Socket).CombinedOutput()
		if err != nil {
			t.Fatalf("sluice-agent %s: %v\n%s", cmd, err, out)
		}
		return string(out)
	}
	if out := agentCLI("status"); !strings.Contains(out, "ready") || !strings.Contains(out, "workloads  1 (sidecar 1)") {
		t.Errorf("status:\n%s", out)
	}
	out := agentCLI("workloads")
	if !strings.Contains(out, "default/cli") || !strings.Contains(out, "cli1") || !strings.Contains(out, "sidecar") {
		t.Errorf("workloads:\n%s", out)
	}
}
