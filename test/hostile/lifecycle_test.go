package hostile

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// A journal record whose netns path became a FIFO (the pod's mount gone,
// a FIFO in its place) must not stop a restarted agent from serving.
func TestJournalPointingAtAFIFO(t *testing.T) {
	n := newNode(t)
	a := n.start(true)
	pod := nstest.NewIn(t, n.Root, "doomed")
	if e, _ := n.run(call{verb: "ADD", id: "doomed", netns: pod.Path}); e != nil {
		t.Fatal(e)
	}
	a.Cmd.Process.Signal(syscall.SIGKILL)
	<-a.Done
	if err := unix.Unmount(pod.Path, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	os.Remove(pod.Path)
	if err := unix.Mkfifo(pod.Path, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fd, err := unix.Open(pod.Path, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	})
	n.start(true) // fails the test if not ready within its deadline
	victim := nstest.NewIn(t, n.Root, "victim")
	n.stillServes(t, victim, "")
}

// A second agent on a state dir in use refuses to start, before it reads
// the journal; the first keeps serving and the victim keeps its ruleset.
func TestSecondAgentOnTheStateDir(t *testing.T) {
	n := newNode(t)
	n.start(true)
	victim := nstest.NewIn(t, n.Root, "victim")
	if e, _ := n.run(call{verb: "ADD", id: "victim", netns: victim.Path}); e != nil {
		t.Fatal(e)
	}
	before := ruleset(t, victim)
	first := n.agent
	second := *n
	second.Socket = filepath.Join(filepath.Dir(n.Socket), "second.sock")
	b := second.start(false, "--health-addr", "127.0.0.1:9891")
	select {
	case <-b.Done:
	case <-time.After(10 * time.Second):
		t.Fatalf("a second agent on the same state dir kept running:\n%s", b.Logs)
	}
	if b.Cmd.ProcessState.Success() || !strings.Contains(b.Logs.String(), "held by another process") {
		t.Fatalf("second agent: %v\n%s", b.Cmd.ProcessState, b.Logs)
	}
	if strings.Contains(b.Logs.String(), "msg=serving") {
		t.Fatal("the second agent served")
	}
	n.agent = first
	n.stillServes(t, victim, before)
}

// An agent whose socket file someone removed listens at the path again
// within seconds, with no restart: plugin calls are served and /healthz is
// green. A socket someone put in its place (renamed over it, so the path
// never went missing) is left alone: it fails liveness, so the kubelet
// restarts the agent, and the agent does not remove it when it exits.
func TestSocketRemovedOrReplaced(t *testing.T) {
	n := newNode(t)
	a := n.start(true)
	if code, body := n.get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d %s", code, body)
	}
	if err := os.Remove(n.Socket); err != nil {
		t.Fatal(err)
	}
	listenedAgain(t, n, n.Socket)
	n.stillServes(t, nstest.NewIn(t, n.Root, "victim"), "")

	replaceSocket(t, "unix", n.Socket)
	nstest.Eventually(t, 5*time.Second, func() bool {
		code, _ := n.get("/healthz")
		return code == 503
	}, "/healthz stayed green with another's socket at the path")
	if _, body := n.get("/healthz"); !strings.Contains(body, "not ours any more") {
		t.Fatalf("/healthz says %q", body)
	}
	stopLeavesOthersSocket(t, a, n.Socket)
}

// listenedAgain waits for the agent's socket at path to be back, and
// /healthz green.
func listenedAgain(t *testing.T, n *node, path string) {
	t.Helper()
	nstest.Eventually(t, 10*time.Second, func() bool {
		_, err := os.Lstat(path)
		code, _ := n.get("/healthz")
		return err == nil && code == 200
	}, "socket %s not listened on again, with /healthz green, within 10 s", path)
}

// replaceSocket renames another server's socket over path, so that the
// path never names nothing, and closes it at the test's end.
func replaceSocket(t *testing.T, network, path string) {
	t.Helper()
	tmp := path + ".other"
	other, err := net.ListenUnix(network, &net.UnixAddr{Name: tmp, Net: network})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// stopLeavesOthersSocket stops the agent with SIGTERM and checks the
// socket someone else put at path outlived the agent's exit.
func stopLeavesOthersSocket(t *testing.T, a *agent, path string) {
	t.Helper()
	a.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.Done:
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not exit on SIGTERM")
	}
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the agent removed a socket that was not its own on exit: %v", err)
	}
}

// A socket path in a shared directory is refused, and the directory is
// left exactly as it was.
func TestSharedSocketDirRefused(t *testing.T) {
	n := newNode(t)
	shared := filepath.Dir(n.Socket)
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	a := n.start(false)
	select {
	case <-a.Done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the agent started on a shared socket dir:\n%s", a.Logs)
	}
	if a.Cmd.ProcessState.Success() || !strings.Contains(a.Logs.String(), "writable by group or others") {
		t.Fatalf("agent: %v\n%s", a.Cmd.ProcessState, a.Logs)
	}
	fi, err := os.Stat(shared)
	if err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Fatalf("shared dir is now %v (%v)", fi.Mode(), err)
	}
}

// A state dir others may write to (where anyone could plant a journal
// record naming a netns) is refused before anything is read from it.
func TestSharedStateDirRefused(t *testing.T) {
	n := newNode(t)
	if err := os.Mkdir(n.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(n.StateDir, 0o777); err != nil {
		t.Fatal(err)
	}
	a := n.start(false)
	select {
	case <-a.Done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the agent started on a shared state dir:\n%s", a.Logs)
	}
	if a.Cmd.ProcessState.Success() || !strings.Contains(a.Logs.String(), "writable by group or others") {
		t.Fatalf("agent: %v\n%s", a.Cmd.ProcessState, a.Logs)
	}
}
