package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

const fakePrev = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[{"address":"10.244.0.9/24","interface":0}]}`

func pluginStdin(socket, version, extra string) []byte {
	return []byte(`{"cniVersion":"` + version + `","name":"e2e","type":"sluice","socket":"` + socket + `","timeout":"1s"` + extra + `}`)
}

func cniEnv(cmd, containerID, netns string) []string {
	return []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=" + containerID, "CNI_NETNS=" + netns, "CNI_IFNAME=eth0",
		"CNI_ARGS=K8S_POD_NAMESPACE=default;K8S_POD_NAME=p"}
}

// ADD fails closed: no agent, no pod. DEL must still succeed; STATUS
// succeeds by default (the node's network is not down) and says "not
// available" (50) with "status": "agent".
func TestAgentDown(t *testing.T) {
	n := newNode(t)
	pod := n.Pod("pod")
	// The ADD waits for an agent until its deadline (an upgrade's gap).
	start := time.Now()
	out, err := execPlugin(t, n.NS, cniEnv("ADD", "down1", pod.Path), pluginStdin(n.Socket, "1.0.0", `,"timeout":"1s","prevResult":`+fakePrev))
	if err == nil {
		t.Fatalf("ADD succeeded with no agent: %s", out)
	}
	e := cniError(t, out)
	if e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, n.Socket) {
		t.Fatalf("ADD error = %d %q, want code 11 naming %s", e.Code, e.Msg, n.Socket)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("ADD with no agent failed after %v, before its deadline", waited)
	}
	if out, err := execPlugin(t, n.NS, cniEnv("DEL", "down1", pod.Path), pluginStdin(n.Socket, "1.0.0", "")); err != nil {
		t.Fatalf("DEL with no agent failed: %v %s", err, out)
	}
	if out, err := execPlugin(t, n.NS, cniEnv("STATUS", "", ""), pluginStdin(n.Socket, "1.1.0", "")); err != nil {
		t.Fatalf("STATUS (default) with no agent = %v %s, want success", err, out)
	}
	out, err = execPlugin(t, n.NS, cniEnv("STATUS", "", ""), pluginStdin(n.Socket, "1.1.0", `,"status":"agent"`))
	if err == nil || cniError(t, out).Code != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS (status: agent) with no agent = %v %s, want code 50", err, out)
	}
	// Excluded namespaces never need the agent (no boot deadlock).
	out, err = execPlugin(t, n.NS, cniEnv("ADD", "down2", pod.Path), pluginStdin(n.Socket, "1.0.0", `,"excludeNamespaces":["default"],"prevResult":`+fakePrev))
	if err != nil {
		t.Fatalf("ADD in an excluded namespace failed with no agent: %v %s", err, out)
	}
}

// A stopped (hung) agent must not hang pod creation past the plugin's
// timeout; when it resumes it serves again.
func TestAgentHungAddTimesOut(t *testing.T) {
	n := newNode(t)
	a := n.startAgent()
	pod := n.Pod("pod")
	a.Cmd.Process.Signal(syscall.SIGSTOP)
	start := time.Now()
	out, err := execPlugin(t, n.NS, cniEnv("ADD", "hung1", pod.Path), pluginStdin(n.Socket, "1.0.0", `,"prevResult":`+fakePrev))
	took := time.Since(start)
	a.Cmd.Process.Signal(syscall.SIGCONT)
	if err == nil {
		t.Fatalf("ADD succeeded against a stopped agent: %s", out)
	}
	if e := cniError(t, out); e.Code != types.ErrTryAgainLater {
		t.Fatalf("error code %d (%s), want 11", e.Code, e.Msg)
	}
	// The timeout is 1s; allow generously for exec and scheduling.
	if took > 10*time.Second {
		t.Fatalf("ADD took %v against a 1s timeout", took)
	}
	if out, err := execPlugin(t, n.NS, cniEnv("ADD", "hung1", pod.Path), pluginStdin(n.Socket, "1.0.0", `,"prevResult":`+fakePrev)); err != nil {
		t.Fatalf("ADD after SIGCONT: %v %s", err, out)
	}
}

// Only root (or --allowed-uids) may call. The socket's mode already keeps
// others out; loosen it to prove the SO_PEERCRED check holds on its own. It
// runs at the handshake, so the refused caller's connection is closed
// before any call exists: it sees Unavailable, not a gRPC answer.
func TestNonRootCallerDenied(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	for p := n.Socket; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if got := runAsNobody(t, n.Socket); got != codes.Unavailable.String() {
		t.Fatalf("uid 65534 got %q, want Unavailable (cut at the handshake)", got)
	}
	if !strings.Contains(n.agent.Logs.String(), "refused a connection on the agent socket") {
		t.Fatal("the refusal was not logged")
	}
	if got := runAsRoot(t, n.Socket); got != codes.OK.String() {
		t.Fatalf("root got %q, want OK", got)
	}
}

func runAsNobody(t *testing.T, socket string) string {
	t.Helper()
	// The test binary sits in a root-only build dir; give nobody a copy.
	dir, err := os.MkdirTemp("", "sluice-e2e-child-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "e2e.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "child", "status", socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return childOutput(t, cmd)
}

func runAsRoot(t *testing.T, socket string) string {
	t.Helper()
	return childOutput(t, exec.Command(os.Args[0], "child", "status", socket))
}

func childOutput(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// Malformed plugin input gets a clear CNI error and never reaches the agent.
func TestPluginRejectsBadInput(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	pod := n.Pod("pod")
	for _, tc := range []struct {
		name  string
		stdin []byte
		code  uint
		msg   string
	}{
		{"garbage", []byte(`{"cniVersion":"1.0.0",`), types.ErrDecodingFailure, ""},
		{"unknown cniVersion", pluginStdin(n.Socket, "9.9.9", `,"prevResult":`+fakePrev), types.ErrIncompatibleCNIVersion, ""},
		{"bad timeout", pluginStdin(n.Socket, "1.0.0", `,"timeout":"x","prevResult":`+fakePrev), types.ErrInvalidNetworkConfig, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := execPlugin(t, n.NS, cniEnv("ADD", "bad1", pod.Path), tc.stdin)
			if err == nil {
				t.Fatalf("accepted: %s", out)
			}
			e := cniError(t, out)
			if e.Code != tc.code || !strings.Contains(e.Msg+e.Details, tc.msg) {
				t.Fatalf("error %d %q %q, want code %d mentioning %q", e.Code, e.Msg, e.Details, tc.code, tc.msg)
			}
		})
	}
	if len(n.Workloads(t)) != 0 {
		t.Fatal("a rejected ADD enrolled a workload")
	}
}

// Hostile requests straight at the socket: each is refused with a clear
// code, nothing is enrolled, and the agent keeps serving.
func TestAgentRefusesHostileRequests(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	pod := n.Pod("pod")
	outside := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink("/proc/1/ns/net", outside); err != nil {
		t.Fatal(err)
	}
	inRoot := filepath.Join(n.Root, "escape")
	if err := os.Symlink("/etc", inRoot); err != nil {
		t.Fatal(err)
	}
	cni := sluicev1.NewCNIClient(n.Client())
	add := func(id, netns, ifName string, v sluicev1.ApiVersion) error {
		_, err := cni.Add(t.Context(), &sluicev1.AddRequest{ApiVersion: v, ContainerId: id, Netns: netns, IfName: ifName})
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
	}{
		{"/etc/passwd", add("h1", "/etc/passwd", "eth0", 1), codes.InvalidArgument},
		{"dotdot", add("h2", n.Root+"/../netns/pod", "eth0", 1), codes.InvalidArgument},
		{"symlink out of roots", add("h3", outside, "eth0", 1), codes.InvalidArgument},
		{"symlink in roots to /etc", add("h4", inRoot+"/passwd", "eth0", 1), codes.InvalidArgument},
		{"own netns", add("h5", "/proc/self/ns/net", "eth0", 1), codes.InvalidArgument},
		{"missing netns", add("h6", filepath.Join(n.Root, "nope"), "eth0", 1), codes.InvalidArgument},
		{"bad container id", add("../x", pod.Path, "eth0", 1), codes.InvalidArgument},
		{"bad ifname", add("h7", pod.Path, "eth0/../x", 1), codes.InvalidArgument},
		{"api version 0", add("h8", pod.Path, "eth0", 0), codes.FailedPrecondition},
		{"api version 99", add("h9", pod.Path, "eth0", 99), codes.FailedPrecondition},
		{"oversize", add(strings.Repeat("a", 2<<20), pod.Path, "eth0", 1), codes.ResourceExhausted},
	} {
		if status.Code(tc.err) != tc.code {
			t.Errorf("%s: got %v, want %s", tc.name, tc.err, tc.code)
		}
	}
	// Bytes that are not gRPC at all.
	c, err := n.NS.Dial("unix", n.Socket, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.0\r\n\r\n\x00\xff garbage"))
	c.Close()

	if len(n.Workloads(t)) != 0 {
		t.Fatal("a refused request enrolled a workload")
	}
	if resp, err := n.Status(); err != nil || !resp.Ready {
		t.Fatalf("agent not serving after hostile input: %v %v", resp, err)
	}
	if _, err := cni.Add(t.Context(), &sluicev1.AddRequest{ApiVersion: 1, ContainerId: "ok1", Netns: pod.Path, IfName: "eth0"}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("good ADD after hostile input: %v", err)
	}
}

// Version skew: a plugin one API version behind the agent (mid-upgrade)
// still gets its pods captured; anything outside the served range is
// refused with both versions named.
func TestAgentServesThePreviousAPIVersion(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	pod := n.Pod("old")
	cni := sluicev1.NewCNIClient(n.Client())
	if _, err := cni.Add(t.Context(), &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_1,
		ContainerId: "old1", Netns: pod.Path, IfName: "eth0"}); err != nil {
		t.Fatalf("ADD at the previous API version: %v", err)
	}
	if s := rulesetState(t, pod); s != "full" {
		t.Fatalf("previous-version ADD: %s", s)
	}
	_, err := cni.Add(t.Context(), &sluicev1.AddRequest{ApiVersion: 3, ContainerId: "new1", Netns: pod.Path, IfName: "eth0"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "api_version 3") || !strings.Contains(err.Error(), "1 through 2") {
		t.Fatalf("ADD at a future API version = %v, want FailedPrecondition naming 3 and the served range", err)
	}
}
