package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/rpc"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// The plugin's verbs against the agent's real gRPC services (rpc.NewServer:
// peer credentials, uid check, the CNI verbs, a Store) over a unix socket
// in a temp dir, in this process; only the kernel and the netns opener are
// redirecttest's. No root. The daemon packages are test imports only
// (deps_test.go checks the plugin binary's).

type agentUnderTest struct {
	sock   string
	cni    *rpc.CNI
	store  *workloads.Store
	ns     *redirecttest.Namespaces
	kernel *redirecttest.Fake
}

type decide func(policy.Pod) (policy.Decision, error)

func (f decide) Decide(_ context.Context, p policy.Pod) (policy.Decision, error) { return f(p) }

func startAgent(t *testing.T) *agentUnderTest {
	t.Helper()
	return startAgentWith(t, redirect.DefaultSpec(), nil)
}

// startAgentWith captures pods with spec; amb, when set, builds the Store's
// ambient side from its namespaces.
func startAgentWith(t *testing.T, spec redirect.Spec, amb func(*redirecttest.Namespaces) *workloads.Ambient) *agentUnderTest {
	t.Helper()
	a := newAgentUnderTest(t, spec, amb)
	if err := a.serve(t); err != nil {
		t.Fatal(err)
	}
	return a
}

// newAgentUnderTest is startAgentWith's agent before it serves.
func newAgentUnderTest(t *testing.T, spec redirect.Spec, amb func(*redirecttest.Namespaces) *workloads.Ambient) *agentUnderTest {
	t.Helper()
	a := &agentUnderTest{sock: filepath.Join(t.TempDir(), "agent.sock"), ns: redirecttest.NewNamespaces(t), kernel: redirecttest.NewFake()}
	cfg := workloads.Config{Dir: t.TempDir(), Opener: a.ns, Kernel: a.kernel}
	if amb != nil {
		cfg.Ambient = amb(a.ns)
	}
	var err error
	a.store, err = workloads.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.cni = &rpc.CNI{Workloads: a.store, Ready: func() (bool, string) { return true, "" }, Inflight: rpc.NewInflight(4),
		Policy: decide(func(p policy.Pod) (policy.Decision, error) {
			if p.Namespace == "kube-system" {
				return policy.Decision{Reason: "namespace kube-system is excluded"}, nil
			}
			return policy.Decision{Capture: true, Spec: spec}, nil
		})}
	return a
}

// serve starts the agent's gRPC server on a.sock until t ends.
func (a *agentUnderTest) serve(t *testing.T) error {
	gs, _ := rpc.NewServer(a.cni, &rpc.Debug{Workloads: a.store, Policy: a.cni.Policy},
		rpc.NewAuthorizer([]uint32{uint32(os.Getuid())}, discardLog()), nil, discardLog())
	lis, err := net.Listen("unix", a.sock)
	if err != nil {
		return err
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return nil
}

// stdin is a chained sluice entry for socket with a prevResult of one IP.
func stdin(t *testing.T, socket string, extra map[string]any) []byte {
	t.Helper()
	conf := map[string]any{"cniVersion": "1.0.0", "name": "net-a", "type": "sluice", "socket": socket,
		"prevResult": map[string]any{"cniVersion": "1.0.0", "ips": []map[string]any{{"address": "10.1.0.2/24"}}}}
	for k, v := range extra {
		conf[k] = v
	}
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func cmdArgs(t *testing.T, socket, id, podNS string, extra map[string]any) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: id, Netns: "/netns/" + id, IfName: "eth0",
		Args: "K8S_POD_NAMESPACE=" + podNS + ";K8S_POD_NAME=p-" + id + ";K8S_POD_UID=uid-" + id, StdinData: stdin(t, socket, extra)}
}

// cniCode is the CNI error code of err, 0 for none.
func cniCode(t *testing.T, err error) uint {
	t.Helper()
	if err == nil {
		return 0
	}
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("%v (%T) is not a CNI error", err, err)
	}
	return e.Code
}

func TestVerbAddEnrolsAndPassesPrevResultThrough(t *testing.T) {
	a := startAgent(t)
	ino := a.ns.Add("/netns/c1")
	out, err := stdoutOf(t, func() error { return cmdAdd(cmdArgs(t, a.sock, "c1", "default", nil)) })
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if !strings.Contains(string(out), `"10.1.0.2/24"`) {
		t.Fatalf("result %s does not pass prevResult through", out)
	}
	if _, ok := a.kernel.Table(ino); !ok {
		t.Fatal("no table after ADD")
	}
	if got := a.store.List(); len(got) != 1 || got[0].Network != "net-a" || got[0].PodUID != "uid-c1" || len(got[0].IPs) != 1 {
		t.Fatalf("record %+v", got)
	}
}

func TestVerbAddPassedThrough(t *testing.T) {
	a := startAgent(t)
	ino := a.ns.Add("/netns/c1")
	if _, err := stdoutOf(t, func() error { return cmdAdd(cmdArgs(t, a.sock, "c1", "kube-system", nil)) }); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if _, ok := a.kernel.Table(ino); ok || len(a.store.List()) != 0 {
		t.Fatal("a passed-through pod got state")
	}
}

// The agent's refusals and failures reach the runtime with the code that
// says whose fault it is: 4 the caller's, 11 try again, 999 the agent's.
func TestVerbAddRefused(t *testing.T) {
	a := startAgent(t)
	// No netns at the path: the caller's fault.
	if _, err := stdoutOf(t, func() error { return cmdAdd(cmdArgs(t, a.sock, "c1", "default", nil)) }); cniCode(t, err) != types.ErrInvalidEnvironmentVariables {
		t.Fatalf("ADD into a missing netns: %v, want code 4", err)
	}
	a.ns.Add("/netns/c2")
	a.kernel.Fail(redirecttest.OpApply, errors.New("netlink says no"))
	_, err := stdoutOf(t, func() error { return cmdAdd(cmdArgs(t, a.sock, "c2", "default", nil)) })
	if cniCode(t, err) != types.ErrInternal || !strings.Contains(err.Error(), "netlink says no") {
		t.Fatalf("ADD with the kernel refusing: %v, want code 999 naming the cause", err)
	}
	if len(a.store.List()) != 0 {
		t.Fatal("a failed ADD left a record")
	}
}

// Fail closed: no agent, no pod. The ADD waits for one until its deadline,
// then fails with an error that names the socket and the wait.
func TestVerbAddAgentDown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "absent.sock")
	start := time.Now()
	_, err := stdoutOf(t, func() error { return cmdAdd(cmdArgs(t, sock, "c1", "default", map[string]any{"timeout": "500ms"})) })
	if cniCode(t, err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "waited for it") {
		t.Fatalf("ADD with no agent: %v, want code 11 naming %s and the wait", err, sock)
	}
	if waited := time.Since(start); waited < 500*time.Millisecond {
		t.Fatalf("ADD with no agent failed after %v, before its deadline", waited)
	}
}

// The agent restarting (a rolling upgrade, a crash): an ADD or CHECK that
// comes while nothing listens on the socket, its file there or not, waits
// for the agent within its deadline and is answered once it serves. It
// failed at once before, and the kubelet tried the pod again only after
// its pod worker's backoff.
func TestVerbsWaitForAgentRestart(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale-socket=%v", stale), func(t *testing.T) {
			a := newAgentUnderTest(t, redirect.DefaultSpec(), nil)
			a.ns.Add("/netns/c1")
			if stale {
				// The exited agent's socket file, nothing accepting on it.
				l, err := net.Listen("unix", a.sock)
				if err != nil {
					t.Fatal(err)
				}
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				l.Close()
			}
			served := make(chan error, 1)
			time.AfterFunc(300*time.Millisecond, func() {
				if stale {
					os.Remove(a.sock)
				}
				served <- a.serve(t)
			})
			_, err := stdoutOf(t, func() error { return cmdAdd(cmdArgs(t, a.sock, "c1", "default", nil)) })
			if serr := <-served; serr != nil {
				t.Fatal(serr)
			}
			if err != nil {
				t.Fatalf("ADD during the agent's restart: %v, want it enrolled once the agent serves", err)
			}
			if len(a.store.List()) != 1 {
				t.Fatalf("records after the ADD: %d, want 1", len(a.store.List()))
			}
		})
	}
}

// DEL never blocks teardown: agent down, netns gone, attachment unknown.
func TestVerbDelNeverFails(t *testing.T) {
	if err := cmdDel(cmdArgs(t, filepath.Join(t.TempDir(), "absent.sock"), "c1", "default", nil)); err != nil {
		t.Fatalf("DEL with no agent: %v", err)
	}
	a := startAgent(t)
	a.ns.Add("/netns/c1")
	if _, err := stdoutOf(t, func() error { return cmdAdd(cmdArgs(t, a.sock, "c1", "default", nil)) }); err != nil {
		t.Fatal(err)
	}
	a.ns.Delete("/netns/c1")
	if err := cmdDel(cmdArgs(t, a.sock, "c1", "default", nil)); err != nil || len(a.store.List()) != 0 {
		t.Fatalf("DEL with the netns gone: %v, records %+v", err, a.store.List())
	}
	if err := cmdDel(cmdArgs(t, a.sock, "never", "default", nil)); err != nil {
		t.Fatalf("DEL of an unknown attachment: %v", err)
	}
}

func TestVerbCheckReportsDrift(t *testing.T) {
	a := startAgent(t)
	ino := a.ns.Add("/netns/c1")
	if _, err := stdoutOf(t, func() error { return cmdAdd(cmdArgs(t, a.sock, "c1", "default", nil)) }); err != nil {
		t.Fatal(err)
	}
	if err := cmdCheck(cmdArgs(t, a.sock, "c1", "default", nil)); err != nil {
		t.Fatalf("CHECK in sync: %v", err)
	}
	a.kernel.Tamper(ino)
	err := cmdCheck(cmdArgs(t, a.sock, "c1", "default", nil))
	if cniCode(t, err) != types.ErrInternal || !strings.Contains(err.Error(), "drifted") {
		t.Fatalf("CHECK after tampering: %v", err)
	}
}

// By default STATUS needs nothing but a parsable entry: an agent that is
// not ready, or not there, does not make the node's network not ready.
func TestVerbStatusDoesNotNeedTheAgent(t *testing.T) {
	a := startAgent(t)
	a.cni.Ready = func() (bool, string) { return false, "policy caches not synced" }
	absent := filepath.Join(t.TempDir(), "absent.sock")
	for _, sock := range []string{a.sock, absent} {
		if err := cmdStatus(cmdArgs(t, sock, "", "", nil)); err != nil {
			t.Errorf("STATUS (default) with the agent at %s not ready or away: %v, want success", sock, err)
		}
	}
	if err := cmdStatus(cmdArgs(t, absent, "", "", map[string]any{"timeout": "soon"})); cniCode(t, err) != types.ErrInvalidNetworkConfig {
		t.Errorf("STATUS of an entry that does not parse: %v, want 7", err)
	}
}

// "status": "agent" asks the agent: 50 when it is not ready or not there.
func TestVerbStatusAsksTheAgent(t *testing.T) {
	a := startAgent(t)
	agent := map[string]any{"status": "agent"}
	if err := cmdStatus(cmdArgs(t, a.sock, "", "", agent)); err != nil {
		t.Fatalf("STATUS of a ready agent: %v", err)
	}
	a.cni.Ready = func() (bool, string) { return false, "policy caches not synced" }
	if err := cmdStatus(cmdArgs(t, a.sock, "", "", agent)); cniCode(t, err) != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS of an agent not ready: %v, want 50", err)
	}
	if err := cmdStatus(cmdArgs(t, filepath.Join(t.TempDir(), "absent.sock"), "", "", agent)); cniCode(t, err) != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS with no agent: %v, want 50", err)
	}
}

func TestVerbGC(t *testing.T) {
	a := startAgent(t)
	for _, id := range []string{"live", "stale"} {
		a.ns.Add("/netns/" + id)
		if _, err := stdoutOf(t, func() error { return cmdAdd(cmdArgs(t, a.sock, id, "default", nil)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmdGC(cmdArgs(t, a.sock, "", "", nil)); cniCode(t, err) != types.ErrInvalidNetworkConfig || len(a.store.List()) != 2 {
		t.Fatalf("GC without cni.dev/valid-attachments: %v, records %d", err, len(a.store.List()))
	}
	valid := map[string]any{"cni.dev/valid-attachments": []map[string]string{{"containerID": "live", "ifname": "eth0"}}}
	if err := cmdGC(cmdArgs(t, a.sock, "", "", valid)); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got := a.store.List(); len(got) != 1 || got[0].ContainerID != "live" {
		t.Fatalf("records after GC: %+v", got)
	}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A CNI_ARGS value that is not UTF-8 cannot go into a proto3 string: the
// caller's fault (4), said before anything is sent, never a half-encoded
// request.
func TestVerbAddNotUTF8(t *testing.T) {
	a := startAgent(t)
	a.ns.Add("/netns/c1")
	args := cmdArgs(t, a.sock, "c1", "default", nil)
	args.Args = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p-\xff;K8S_POD_UID=uid-c1"
	_, err := stdoutOf(t, func() error { return cmdAdd(args) })
	if cniCode(t, err) != types.ErrInvalidEnvironmentVariables || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("ADD with a non-UTF-8 pod name: %v, want code 4 naming UTF-8", err)
	}
	if len(a.store.List()) != 0 {
		t.Fatal("the request reached the agent")
	}
}

// A request larger than the agent's 64 KiB stream window (a big args block
// in the entry) goes out as the agent's window updates come, and arrives
// whole (the agent parses it): the real server's flow control, end to end.
func TestVerbAddLargeRequest(t *testing.T) {
	a := startAgent(t)
	a.ns.Add("/netns/c1")
	big := strings.Repeat("a", 300<<10)
	args := cmdArgs(t, a.sock, "c1", "default", map[string]any{"args": map[string]any{"cni": map[string]any{"note": big}}})
	if _, err := stdoutOf(t, func() error { return cmdAdd(args) }); err != nil {
		t.Fatalf("ADD with a 300 KiB entry: %v", err)
	}
	if _, ok := a.store.Get(workloads.Attachment{ContainerID: "c1", IfName: "eth0"}); !ok {
		t.Fatal("no record after the large ADD")
	}
}

// DEL never reads the previous result (libcni's cached one), so one it
// cannot parse must not fail the teardown: the attachment is still
// released. It failed with "failed to parse prevResult" before.
func TestVerbDelIgnoresPrevResult(t *testing.T) {
	a := startAgent(t)
	a.ns.Add("/netns/c1")
	if _, err := stdoutOf(t, func() error { return cmdAdd(cmdArgs(t, a.sock, "c1", "default", nil)) }); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	del := cmdArgs(t, a.sock, "c1", "default", map[string]any{
		"prevResult": map[string]any{"cniVersion": "1.0.0", "ips": []map[string]any{{"address": "not-an-address"}}}})
	if err := cmdDel(del); err != nil {
		t.Fatalf("DEL with an unparsable cached result: %v", err)
	}
	if got := a.store.List(); len(got) != 0 {
		t.Fatalf("the attachment was not released: %+v", got)
	}
	// ADD still refuses it: the IPs come from there.
	a.ns.Add("/netns/c2")
	add := cmdArgs(t, a.sock, "c2", "default", map[string]any{
		"prevResult": map[string]any{"cniVersion": "1.0.0", "ips": []map[string]any{{"address": "not-an-address"}}}})
	if _, err := stdoutOf(t, func() error { return cmdAdd(add) }); cniCode(t, err) != types.ErrInvalidNetworkConfig {
		t.Fatalf("ADD with an unparsable prevResult: %v, want code 7", err)
	}
}

// ADD writes, byte for byte, what types.PrintResult writes for the result
// it passes through, in every version the plugin supports; the result is
// encoded before the call and written after it.
func TestVerbAddResultIsPrintResults(t *testing.T) {
	a := startAgent(t)
	for i, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		id := fmt.Sprintf("c%d", i)
		a.ns.Add("/netns/" + id)
		ip := map[string]any{"address": "10.1.0.2/24", "gateway": "10.1.0.1"}
		if v < "1" {
			ip["version"] = "4"
		}
		args := cmdArgs(t, a.sock, id, "default", map[string]any{"cniVersion": v,
			"prevResult": map[string]any{"cniVersion": v, "ips": []map[string]any{ip}}})
		conf, err := parseConfig(args.StdinData, true)
		if err != nil {
			t.Fatal(err)
		}
		want, err := stdoutOf(t, func() error { return types.PrintResult(conf.PrevResult, v) })
		if err != nil {
			t.Fatal(err)
		}
		got, err := stdoutOf(t, func() error { return cmdAdd(args) })
		if err != nil || string(got) != string(want) {
			t.Fatalf("cniVersion %s: ADD wrote %q (%v), PrintResult %q", v, got, err, want)
		}
	}
}
