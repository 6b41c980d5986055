package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/rpc"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
)

// The CLI against the agent's real gRPC services on a unix socket in a
// temp dir, in this process, over redirecttest's kernel: no root.

// An ESC sequence that, printed raw, would retitle the terminal and clear
// the screen.
const hostile = "\x1b]0;owned\x07\x1b[2J"

type cliPolicy struct{}

func (cliPolicy) Decide(_ context.Context, p policy.Pod) (policy.Decision, error) {
	if p.Namespace == "zt" {
		return policy.Decision{}, fmt.Errorf("decide: %w", ztunnel.ErrNotConnected)
	}
	if p.Namespace == "skip" {
		return policy.Decision{Reason: "annotation sidecar.istio.io/inject=" + hostile, Inputs: []string{"annotation: " + hostile}}, nil
	}
	return policy.Decision{Capture: true, Spec: redirect.DefaultSpec(), Reason: "sidecar", Inputs: []string{"annotation traffic.sidecar.istio.io/excludeOutboundPorts: 9" + hostile}}, nil
}

type zdsStub struct{ n int }

func (z zdsStub) Connections() int { return z.n }
func (z zdsStub) Ready() (bool, string) {
	if z.n == 0 {
		return false, "no ztunnel connected on /run/z.sock"
	}
	return true, ""
}

// cliAgent serves the agent's services on a socket and enrols one pod
// whose name holds hostile.
func cliAgent(t *testing.T, zds rpc.ZtunnelLink) string {
	t.Helper()
	return cliAgentFor(t, zds, uint32(os.Getuid()))
}

// cliAgentFor is cliAgent serving only uid.
func cliAgentFor(t *testing.T, zds rpc.ZtunnelLink, uid uint32) string {
	t.Helper()
	ns := redirecttest.NewNamespaces(t)
	store, err := workloads.Open(workloads.Config{Dir: t.TempDir(), Opener: ns, Kernel: redirecttest.NewFake()})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	cni := &rpc.CNI{Workloads: store, Policy: cliPolicy{}, Ready: func() (bool, string) { return true, "" }, Inflight: rpc.NewInflight(2)}
	debug := &rpc.Debug{Workloads: store, Policy: cliPolicy{}, ZDS: zds, ZtunnelSocket: "/run/z.sock"}
	gs, _ := rpc.NewServer(cni, debug, rpc.NewAuthorizer([]uint32{uid}, log), nil, log)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	ns.Add("/netns/c1")
	if _, err := cni.Add(context.Background(), &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2,
		ContainerId: "c0ffee0001", Netns: "/netns/c1", IfName: "eth0",
		Pod: &sluicev1.PodRef{Namespace: "shop", Name: "cart" + hostile, Uid: "u1"},
		Ips: []*sluicev1.IPConfig{{Address: "10.1.0.2/24"}}}); err != nil {
		t.Fatal(err)
	}
	return sock
}

func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runCommand(args[0], args[1:], func(string) string { return "" }, &out, &errOut, nil)
	return out.String(), errOut.String(), code
}

// Pod names, annotations and the agent's messages reach the terminal
// escaped: no ESC or BEL byte is printed, and the text is still there.
func TestCLIEscapesControlSequences(t *testing.T) {
	sock := cliAgent(t, nil)
	for _, args := range [][]string{
		{"workloads", "--socket", sock},
		{"get", "shop/cart" + hostile, "--socket", sock},
		{"explain", "shop/cart", "--socket", sock},
		{"explain", "skip/cart" + hostile, "--socket", sock},
		{"get", "shop/none" + hostile, "--socket", sock},
	} {
		out, errOut, code := cli(t, args...)
		all := out + errOut
		if strings.ContainsAny(all, "\x1b\x07") {
			t.Errorf("%s printed raw control characters (exit %d):\n%q", args[0], code, all)
		}
		if !strings.Contains(all, `\x1b]0;owned\x07`) {
			t.Errorf("%s: the escaped text is missing (exit %d):\n%s", args[0], code, all)
		}
	}
}

// -o json|yaml print data a script can read, with the mode as the agent
// names it; the same escapes hold in JSON.
func TestCLIOutputFormats(t *testing.T) {
	sock := cliAgent(t, zdsStub{n: 1})
	for _, format := range []string{"json", "yaml"} {
		out, errOut, code := cli(t, "workloads", "-o", format, "--socket", sock)
		if code != 0 {
			t.Fatalf("workloads -o %s: exit %d: %s", format, code, errOut)
		}
		var ws workloadsView
		b := []byte(out)
		if format == "yaml" {
			var err error
			if b, err = yaml.YAMLToJSON(b); err != nil {
				t.Fatalf("workloads -o yaml is not YAML: %v\n%s", err, out)
			}
		}
		if err := json.Unmarshal(b, &ws); err != nil || len(ws.Workloads) != 1 {
			t.Fatalf("workloads -o %s: %v\n%s", format, err, out)
		}
		if w := ws.Workloads[0]; w.Mode != "sidecar" || w.Pod != "cart"+hostile || w.IPs[0] != "10.1.0.2/24" {
			t.Errorf("workloads -o %s: %+v", format, w)
		}
		if strings.ContainsAny(out, "\x1b\x07") {
			t.Errorf("workloads -o %s printed raw control characters", format)
		}
	}
	for _, cmd := range [][]string{{"status"}, {"get", "c0ffee"}, {"explain", "shop/cart"}, {"version"}} {
		out, errOut, code := cli(t, append(cmd, "-o", "json", "--socket", sock)...)
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
			t.Errorf("%s -o json: exit %d, %v\n%s%s", cmd[0], code, err, out, errOut)
		}
	}
	out, _, _ := cli(t, "status", "-o", "json", "--socket", sock)
	var st statusView
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Ztunnel == nil || st.Ztunnel.Connections != 1 || !st.Ready {
		t.Errorf("status -o json: %v %+v\n%s", err, st, out)
	}
}

// status names the ztunnel link: an agent that is ready with no ztunnel
// says so, in a line of its own.
func TestCLIStatusShowsZtunnelLink(t *testing.T) {
	for _, tc := range []struct {
		zds  rpc.ZtunnelLink
		want string
	}{
		{nil, "ztunnel    off"},
		{zdsStub{n: 0}, "ztunnel    NOT CONNECTED: no ztunnel connected on /run/z.sock"},
		{zdsStub{n: 2}, "ztunnel    connected (2) on /run/z.sock"},
	} {
		sock := cliAgent(t, tc.zds)
		out, errOut, code := cli(t, "status", "--socket", sock)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("status: exit %d, want a line %q:\n%s%s", code, tc.want, out, errOut)
		}
	}
}

// Without an agent: version still prints this binary's and succeeds; the
// other commands say what to do, naming the socket; a relative --socket is
// the working directory's.
func TestCLIWithoutAgent(t *testing.T) {
	dir := t.TempDir()
	absent := filepath.Join(dir, "agent.sock")
	out, errOut, code := cli(t, "version", "--socket", absent)
	if code != 0 || !strings.Contains(out, "sluice-agent (this binary)") || !strings.Contains(out, "not reachable") {
		t.Errorf("version with no agent: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, code := cli(t, "version", "--client", "--socket", absent); code != 0 || strings.Contains(out, "running") {
		t.Errorf("version --client: exit %d\n%s", code, out)
	}
	_, errOut, code = cli(t, "status", "--socket", absent)
	if code != 1 || !strings.Contains(errOut, "cannot reach the agent at socket "+absent+": no such file or directory: is the agent running") ||
		strings.Contains(errOut, "rpc error") {
		t.Errorf("status with no agent: exit %d\n%s", code, errOut)
	}

	sock := cliAgent(t, nil)
	wd, _ := os.Getwd()
	t.Cleanup(func() { os.Chdir(wd) })
	if err := os.Chdir(filepath.Dir(sock)); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := cli(t, "workloads", "--socket", "agent.sock"); code != 0 || !strings.Contains(out, "c0ffee0001") {
		t.Errorf("relative --socket: exit %d\n%s%s", code, out, errOut)
	}
}

// Usage errors exit 2 with one line; the agent's refusal exits 1.
func TestCLIUsageErrorsExit2(t *testing.T) {
	sock := cliAgent(t, nil)
	for _, args := range [][]string{
		{"get", "--socket", sock},
		{"get", "a", "b", "--socket", sock},
		{"status", "--bogus", "--socket", sock},
		{"status", "-o", "xml", "--socket", sock},
		{"explain", "noslash", "--socket", sock},
	} {
		_, errOut, code := cli(t, args...)
		if code != 2 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%q: exit %d, want 2 and one line:\n%s", args, code, errOut)
		}
	}
	if _, errOut, code := cli(t, "get", "shop/absent", "--socket", sock); code != 1 || !strings.Contains(errOut, "answered NotFound") {
		t.Errorf("get of an absent pod: exit %d\n%s", code, errOut)
	}
}

// An agent that does not serve the caller's uid says so: the person is
// told about --allowed-uids, not that the agent is down.
func TestCLIRefusedUIDSaysWhy(t *testing.T) {
	sock := cliAgentFor(t, nil, uint32(os.Getuid())+4242)
	_, errOut, code := cli(t, "workloads", "--socket", sock)
	if code != 1 || !strings.Contains(errOut, "--allowed-uids") || strings.Contains(errOut, "is the agent running") {
		t.Errorf("workloads as a uid the agent refuses: exit %d\n%s", code, errOut)
	}
	// The agent up, ztunnel not: the agent's answer is shown as its answer.
	_, errOut, _ = cli(t, "explain", "zt/pod", "--socket", cliAgent(t, nil))
	if !strings.Contains(errOut, "answered Unavailable: no ztunnel is connected") || strings.Contains(errOut, "--allowed-uids") {
		t.Errorf("explain with no ztunnel:\n%s", errOut)
	}
}

// An agent that hangs up before answering is named as such whatever the
// moment it hung up: grpc-go words it "connection error", a broken pipe or
// an EOF depending on the race, and each is the refusal of a uid it does
// not serve, never an answer of its own.
func TestCLIHangUpSaysWhy(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// As the agent's handshake does: the client's preface read,
			// then the connection closed unanswered.
			c.Read(make([]byte, 64))
			c.Close()
		}
	}()
	for i := range 30 {
		_, errOut, code := cli(t, "workloads", "--socket", sock)
		if code != 1 || !strings.Contains(errOut, "--allowed-uids") || strings.Contains(errOut, "answered") {
			t.Fatalf("try %d, an agent that hangs up: exit %d\n%s", i, code, errOut)
		}
	}
}
