package agenttest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// holderScript lays out a PrivateRun node's mount namespace and then keeps
// it: its own /run, an overlay on /var/lib whose writes land in the node's
// dir, and mounts shared within the namespace (a runtime's netns mounts
// reach its shims).
const holderScript = `set -eu
mount -t tmpfs -o mode=0755 sluice-node-run /run
mkdir -p /run/netns /run/containerd /run/nri /run/sluice
mount -t overlay sluice-node-var -o lowerdir=/var/lib,upperdir="$1/var/upper",workdir="$1/var/work" /var/lib
mount --make-rshared /
echo ready
exec sleep infinity
`

// hold starts the holder: a private mount namespace, in the node netns.
func (n *Node) hold() {
	t := n.T
	t.Helper()
	for _, d := range []string{"var/upper", "var/work"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := n.NS.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", holderScript, "sh", n.Dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	n.holder = proctest.Start(t, cmd)
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("the node's mount namespace failed to set up: %q", line)
	}
}

// HolderPID is the process that keeps a PrivateRun node's namespaces.
func (n *Node) HolderPID() int { return n.holder.Cmd.Process.Pid }

// Command is argv run in the node: its netns, and its mount namespace
// when it has one.
func (n *Node) Command(ctx context.Context, argv ...string) *exec.Cmd {
	if n.holder == nil {
		return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.NS.Path, "--"}, argv...)...)
	}
	return n.enter(ctx, "--net", argv)
}

// HostNetCommand is argv run in the machine's netns (to reach a server on
// its loopback, the test kube-apiserver), in the node's mount namespace
// when it has one.
func (n *Node) HostNetCommand(ctx context.Context, argv ...string) *exec.Cmd {
	if n.holder == nil {
		return exec.CommandContext(ctx, argv[0], argv[1:]...)
	}
	return n.enter(ctx, "", argv)
}

func (n *Node) enter(ctx context.Context, net string, argv []string) *exec.Cmd {
	args := []string{"--target", strconv.Itoa(n.HolderPID())}
	if net != "" {
		args = append(args, net)
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(append(args, "--mount", "--"), argv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Output runs argv in the node and returns its stdout; stderr goes into
// the error.
func (n *Node) Output(ctx context.Context, argv ...string) (string, error) {
	cmd := n.Command(ctx, argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, stderr.Bytes())
	}
	return string(out), nil
}

// Path is a path of the node as the test sees it: itself, or through the
// holder's root when the node has its own mount namespace. An absolute
// symlink on the way would resolve in the test's own mount namespace, so
// the one that matters here (/var/run → /run) is undone.
func (n *Node) Path(p string) string {
	if n.holder == nil {
		return p
	}
	if rest, ok := strings.CutPrefix(p, "/var/run/"); ok {
		p = "/run/" + rest
	}
	return "/proc/" + strconv.Itoa(n.HolderPID()) + "/root" + p
}

// KillAll kills every process in the node's cgroup (the pods' pause
// processes, which have mount namespaces of their own) and, with
// PrivateRun, every process in the node's mount namespace but the holder
// (shims daemonize).
func (n *Node) KillAll() {
	if hs, err := nstest.CgroupHierarchies(); err == nil {
		for _, pid := range nstest.CgroupPIDs(hs, n.Cgroup) {
			if pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if n.holder == nil {
		return
	}
	self := mountNS(n.HolderPID())
	if self == 0 {
		return
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == n.HolderPID() || mountNS(pid) != self {
			continue
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func mountNS(pid int) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strconv.Itoa(pid)+"/ns/mnt", &st); err != nil {
		return 0
	}
	return st.Ino
}
