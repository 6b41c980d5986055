package nri_test

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
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// node is a private network and mount namespace that plays the machine for
// one test: its own /run (containerd's sockets and state, the shims'
// sockets under /run/containerd/s, the pods' netns mounts, the NRI and
// agent sockets) and a copy-on-write /var/lib (libcni's cache), so nothing
// of the machine's is touched. A holder process keeps the namespaces; every
// process of the test runs in them through nsenter.
type node struct {
	t      testing.TB
	dir    string
	holder *exec.Cmd
	pid    int
	cgroup string // cgroup parent of the pods, removed at the end
	// agentInHostNetns runs the agent in the machine's netns (and the
	// node's mount namespace), to reach the test API server on loopback.
	agentInHostNetns bool
	// capabilities, when set, are the agent's only ones (agenttest.Capped).
	capabilities []string
}

const holderScript = `set -eu
mount -t tmpfs -o mode=0755 sluice-nri-run /run
mkdir -p /run/netns /run/containerd /run/nri /run/sluice
mount -t overlay sluice-nri-var -o lowerdir=/var/lib,upperdir="$1/var/upper",workdir="$1/var/work" /var/lib
mount --make-rshared /
ip link set lo up
echo ready
exec sleep infinity
`

func newNode(t testing.TB) *node {
	t.Helper()
	nstest.RequireRoot(t)
	// Short: unix socket paths under it must stay below 108 bytes.
	dir, err := os.MkdirTemp("", "sluice-nri-")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, dir: dir, cgroup: "/" + filepath.Base(dir)}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{"var/upper", "var/work"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.holder = exec.Command("unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c", holderScript, "sh", dir)
	n.holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	n.holder.Stderr = os.Stderr
	out, err := n.holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	held, err := proctest.StartLocked(n.holder)
	if err != nil {
		t.Fatalf("start the node's namespaces: %v", err)
	}
	t.Cleanup(func() {
		n.holder.Process.Kill()
		<-held
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("the node's namespaces failed to set up: %q", line)
	}
	n.pid = n.holder.Process.Pid
	t.Cleanup(n.removeCgroups)
	return n
}

// command is argv run in the node's namespaces.
func (n *node) command(ctx context.Context, argv ...string) *exec.Cmd {
	args := append([]string{"--target", strconv.Itoa(n.pid), "--net", "--mount", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// commandMountOnly is argv in the node's mount namespace only.
func (n *node) commandMountOnly(ctx context.Context, argv ...string) *exec.Cmd {
	args := append([]string{"--target", strconv.Itoa(n.pid), "--mount", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// run runs argv in the node and returns its stdout; stderr goes into the
// error.
func (n *node) run(ctx context.Context, argv ...string) (string, error) {
	cmd := n.command(ctx, argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, stderr.Bytes())
	}
	return string(out), nil
}

// path is a path inside the node's mount namespace as the test sees it.
// An absolute symlink on the way would resolve in the test's own mount
// namespace, so the one that matters here (/var/run → /run) is undone.
func (n *node) path(p string) string {
	if rest, ok := strings.CutPrefix(p, "/var/run/"); ok {
		p = "/run/" + rest
	}
	return "/proc/" + strconv.Itoa(n.pid) + "/root" + p
}

// removeCgroups removes the pods' cgroups under the node's parent, and
// the parent, in every hierarchy.
func (n *node) removeCgroups() {
	hs, err := nstest.CgroupHierarchies()
	if err == nil {
		err = nstest.RemoveCgroup(hs, n.cgroup, 5*time.Second)
	}
	if err != nil {
		n.t.Error(err)
	}
}

// conflistEntries is every CNI config of the node, concatenated.
func (n *node) conflistEntries() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(n.dir, "net.d", "*"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		b.Write(data)
	}
	return b.String()
}
