package e2e

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/api/zds"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// zdsClient plays ztunnel on the ZDS socket: hello, then one request per
// packet, each acked.
type zdsClient struct {
	t  *testing.T
	uc *net.UnixConn
}

func connectZDS(t *testing.T, path string) *zdsClient {
	t.Helper()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatalf("ztunnel: dial %s: %v", path, err)
	}
	t.Cleanup(func() { uc.Close() })
	z := &zdsClient{t: t, uc: uc}
	z.send(&zds.ZdsHello{Version: zds.Version_V1})
	return z
}

func (z *zdsClient) send(m proto.Message) {
	z.t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		z.t.Fatal(err)
	}
	if _, _, err := z.uc.WriteMsgUnix(b, nil, nil); err != nil {
		z.t.Fatalf("ztunnel: write: %v", err)
	}
}

// next reads a request, acks it, and returns it with the inode of the netns
// an Add carried.
func (z *zdsClient) next() (*zds.WorkloadRequest, uint64) {
	z.t.Helper()
	req, ino := z.nextUnacked()
	z.ack()
	return req, ino
}

func (z *zdsClient) ack() {
	z.t.Helper()
	z.send(&zds.WorkloadResponse{Payload: &zds.WorkloadResponse_Ack{Ack: &zds.Ack{}}})
}

// nextUnacked reads a request without acking it.
func (z *zdsClient) nextUnacked() (*zds.WorkloadRequest, uint64) {
	z.t.Helper()
	z.uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf, oob := make([]byte, 1024), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := z.uc.ReadMsgUnix(buf, oob)
	if err != nil || n == 0 {
		z.t.Fatalf("ztunnel: read: %v (%d bytes)", err, n)
	}
	req := &zds.WorkloadRequest{}
	if err := proto.Unmarshal(buf[:n], req); err != nil {
		z.t.Fatalf("ztunnel: decode: %v", err)
	}
	var ino uint64
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			z.t.Fatalf("ztunnel: control messages: %v", err)
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			z.t.Fatalf("ztunnel: SCM_RIGHTS: %v %v", fds, err)
		}
		var st unix.Stat_t
		unix.Fstat(fds[0], &st)
		unix.Close(fds[0])
		ino = st.Ino
	}
	return req, ino
}

func netnsInode(t *testing.T, ns *nstest.NS) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(ns.Path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// The ambient path end to end: ADD fails "try again" without ztunnel
// (--ztunnel-connect-wait 0), hands it the pod's netns over ZDS, lists the pod IP in the
// node's probe table and captures the app's traffic to ztunnel's port;
// a restarted agent re-sends the pod in its snapshot; DEL tells ztunnel and
// cleans the node; an uninstall exit removes the host table.
func TestAmbientHandsPodsToZtunnel(t *testing.T) {
	n := newNode(t)
	zsock := filepath.Join(t.TempDir(), "ztunnel", "ztunnel.sock")
	args := []string{"--ambient", "--default-mode", "ambient", "--host-netns", n.NS.Path, "--ztunnel-socket", zsock,
		"--ztunnel-connect-wait", "0"}
	n.startAgent(args...)
	c := n.cni(n.conflist("1.1.0", ""))
	pod := n.Pod("amb")
	rc := rt("amb1", pod)

	if _, err := c.Add(rc); err == nil || !strings.Contains(err.Error(), "no ztunnel connected") {
		t.Fatalf("ADD with no ztunnel = %v, want a try-again error naming ztunnel", err)
	}
	if err := c.Del(rc); err != nil {
		t.Fatal(err)
	}

	z := connectZDS(t, zsock)
	if req, _ := z.next(); req.GetSnapshotSent() == nil {
		t.Fatalf("first message %v, want an empty snapshot", req)
	}
	added := make(chan error, 1)
	go func() { _, err := c.Add(rc); added <- err }()
	req, ino := z.next()
	if req.GetAdd().GetUid() != "uid-amb" || ino != netnsInode(t, pod) {
		t.Fatalf("ztunnel got %v with netns inode %d, want Add uid-amb with the pod's netns %d", req, ino, netnsInode(t, pod))
	}
	if err := <-added; err != nil {
		t.Fatalf("ADD: %v", err)
	}
	n.expectInSync(t, "amb1")
	if out := n.NS.Run(t, "nft", "list", "set", "inet", "sluice-host", "probe-pods-v4"); !strings.Contains(out, "10.244.0.") {
		t.Fatalf("pod IP not in the host probe set:\n%s", out)
	}
	p := startProxy(t, pod, "15001")
	if _, err := dialFrom(t, pod, "10.96.0.10:80"); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "10.96.0.10:80")

	// A restarted agent gives the new connection every enrolled pod.
	n.agent.Cmd.Process.Kill()
	<-n.agent.Done
	n.startAgent(args...)
	z = connectZDS(t, zsock)
	if req, ino := z.next(); req.GetAdd().GetUid() != "uid-amb" || ino != netnsInode(t, pod) {
		t.Fatalf("snapshot after restart starts with %v, want Add uid-amb", req)
	}
	if req, _ := z.next(); req.GetSnapshotSent() == nil {
		t.Fatalf("snapshot not closed: %v", req)
	}

	deleted := make(chan error, 1)
	go func() { deleted <- c.Del(rc) }()
	if req, _ := z.next(); req.GetDel().GetUid() != "uid-amb" {
		t.Fatalf("ztunnel got %v on DEL, want Del uid-amb", req)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if out := n.NS.Run(t, "nft", "list", "set", "inet", "sluice-host", "probe-pods-v4"); strings.Contains(out, "10.244.0.") {
		t.Fatalf("pod IP left in the host probe set after DEL:\n%s", out)
	}
	if s := rulesetState(t, pod); s != "none" {
		t.Fatalf("pod netns after DEL: %s", s)
	}
	n.agent.Stop(t)
	if err := n.NS.Command("nft", "list", "table", "inet", "sluice-host").Run(); err == nil {
		t.Fatal("host table left after an uninstall exit")
	}
	if _, err := os.Stat(zsock); !os.IsNotExist(err) {
		t.Fatalf("ZDS socket left after exit: %v", err)
	}
}

// SIGTERM drains: an ADD in flight when the signal arrives (here, an
// ambient ADD waiting for ztunnel's ack) completes, with everything it
// needs still running.
func TestSIGTERMDrainsInFlightADD(t *testing.T) {
	n := newNode(t)
	zsock := filepath.Join(t.TempDir(), "ztunnel", "ztunnel.sock")
	a := n.startAgent("--ambient", "--default-mode", "ambient", "--host-netns", n.NS.Path, "--ztunnel-socket", zsock)
	z := connectZDS(t, zsock)
	if req, _ := z.next(); req.GetSnapshotSent() == nil {
		t.Fatalf("want an empty snapshot, got %v", req)
	}
	c := n.cni(n.conflist("1.1.0", ""))
	pod := n.Pod("drain")
	added := make(chan error, 1)
	go func() { _, err := c.Add(rt("drain1", pod)); added <- err }()
	// The ADD is now inside the agent, waiting for the ack.
	req, ino := z.nextUnacked()
	if req.GetAdd().GetUid() != "uid-drain" || ino != netnsInode(t, pod) {
		t.Fatalf("ztunnel got %v", req)
	}
	a.Cmd.Process.Signal(syscall.SIGTERM)
	nstest.Eventually(t, 5*time.Second, func() bool {
		return len(a.Logs.Lines("signal received; draining")) == 1
	}, "agent did not start draining")
	z.ack()
	if err := <-added; err != nil {
		t.Fatalf("the in-flight ADD failed across SIGTERM: %v", err)
	}
	select {
	case <-a.Done:
	case <-time.After(15 * time.Second):
		t.Fatal("agent did not exit after draining")
	}
	if !a.Cmd.ProcessState.Success() {
		t.Fatalf("agent exit: %v\n%s", a.Cmd.ProcessState, a.Logs)
	}
}

// An ambient ADD that meets no ztunnel waits for one (the default
// --ztunnel-connect-wait) before it takes any lock: the ztunnel that
// connects meanwhile gets an empty snapshot, then the ADD's Add, and the
// runtime's ADD succeeds with the pod captured. Before, the ADD failed at once and the kubelet tried
// again only after its backoff. With no ztunnel by the wait's end the ADD
// fails, rolled back, naming the wait.
func TestAmbientAddWaitsForZtunnel(t *testing.T) {
	n := newNode(t)
	zsock := filepath.Join(t.TempDir(), "ztunnel", "ztunnel.sock")
	n.startAgent("--ambient", "--default-mode", "ambient", "--host-netns", n.NS.Path, "--ztunnel-socket", zsock,
		"--ztunnel-connect-wait", "3s")
	// A plugin deadline past the wait, as the default 10 s is past 5 s.
	c := n.cni(bytes.Replace(n.conflist("1.1.0", ""), []byte(`"timeout": "2s"`), []byte(`"timeout": "8s"`), 1))

	lone := n.Pod("lone")
	if _, err := c.Add(rt("lone1", lone)); err == nil || !strings.Contains(err.Error(), "waited for one 3s") {
		t.Fatalf("ADD with no ztunnel for the whole wait = %v, want a try-again error saying it waited", err)
	}
	if out := lone.Run(t, "nft", "list", "tables"); strings.Contains(out, "sluice") {
		t.Fatalf("the failed ADD left its table:\n%s", out)
	}

	pod := n.Pod("amb")
	rc := rt("amb1", pod)
	added := make(chan error, 1)
	go func() { _, err := c.Add(rc); added <- err }()
	// The ADD waits before it takes any lock or changes anything: the pod
	// is not listed and its netns holds no table while it waits.
	n.agent.Wait(t, 5*time.Second, func() bool {
		return n.agent.Logs.Count("the ADD waits for one", "uid-amb") > 0
	}, "the ADD waiting for ztunnel")
	select {
	case err := <-added:
		t.Fatalf("ADD returned %v with no ztunnel connected, want it to wait", err)
	default:
	}
	if slices.ContainsFunc(n.Workloads(t), func(w *sluicev1.Workload) bool { return w.ContainerId == "amb1" }) {
		t.Fatal("the waiting ADD's record is listed: it holds its attachment while it waits")
	}
	z := connectZDS(t, zsock)
	if req, _ := z.next(); req.GetSnapshotSent() == nil {
		t.Fatalf("snapshot: %v, want an empty one (the waiting pod is not enrolled yet)", req)
	}
	if req, ino := z.next(); req.GetAdd().GetUid() != "uid-amb" || ino != netnsInode(t, pod) {
		t.Fatalf("after the snapshot: %v (netns %d), want the ADD's own Add of uid-amb", req, ino)
	}
	if err := <-added; err != nil {
		t.Fatalf("ADD that waited for ztunnel: %v", err)
	}
	n.expectInSync(t, "amb1")
	p := startProxy(t, pod, "15001")
	if _, err := dialFrom(t, pod, "10.96.0.10:80"); err != nil {
		t.Fatal(err)
	}
	p.expect(t, "10.96.0.10:80")
}
