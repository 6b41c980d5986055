package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/internal/ociimage"
	"github.com/sluicemesh/sluice/test/harness/agenttest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// crictlVersion is served by the Go module proxy (v1.35.0 is not).
const crictlVersion = "v1.37.0"

// runtimeBinaries are what Debian's containerd and runc packages provide
// and the test execs. CI installs them; a missing one is a broken CI image,
// not a reason to skip.
var runtimeBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"}

func requireRuntimeBinaries(t *testing.T) {
	t.Helper()
	var missing []string
	for _, b := range runtimeBinaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s not on PATH: install Debian's packages with `apt-get install -y containerd runc`", strings.Join(missing, ", "))
	}
}

// containerd is one containerd with the CRI plugin, isolated from any on the
// machine: its own root, state, sockets, runc root and config, run inside
// the node netns so the CNI bridge lands there.
type containerd struct {
	t      *testing.T
	dir    string
	socket string
	crictl string
	cfg    string // crictl's config
	logs   *agenttest.Logs
	cmd    *exec.Cmd
	done   chan struct{}
	// sandboxes maps each pod sandbox run to its netns path; cleanup
	// removes what a failed test left of them.
	sandboxes map[string]string
	// cgroupParent holds the sandboxes' cgroups (cgroupfs driver), so
	// cleanup can find and remove them.
	cgroupParent string
}

// containerdConfig is a version 2 config. Only what the test needs is on;
// plugins that would touch the machine's own paths (/opt/containerd) or
// that cannot work here are off.
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[debug]
  level = "info"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  # This VM's root lacks CAP_SYS_RESOURCE: never lower a child's oom_score_adj.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[6]q
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    max_conf_num = 1
`

// startContainerd runs containerd in the node netns with the CRI plugin's
// CNI dirs set to the node's, waits until CRI reports its network ready
// (the conf dir loaded) and imports the pause image. Everything it starts
// is stopped and removed when the test ends.
func (n *node) startContainerd(crictl string) *containerd {
	t := n.t
	t.Helper()
	requireRuntimeBinaries(t)
	// Short paths: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "sluice-ctd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &containerd{
		t:         t,
		dir:       dir,
		socket:    filepath.Join(dir, "containerd.sock"),
		crictl:    crictl,
		cfg:       filepath.Join(dir, "crictl.yaml"),
		logs:      &agenttest.Logs{},
		done:      make(chan struct{}),
		sandboxes: map[string]string{},
	}
	c.cgroupParent = "/" + filepath.Base(dir)
	t.Cleanup(func() { os.RemoveAll(dir) })

	conf := fmt.Sprintf(containerdConfig,
		filepath.Join(dir, "root"), filepath.Join(dir, "state"),
		c.socket, c.socket+".ttrpc", ociimage.PauseRef, filepath.Join(dir, "runc"),
		n.cniBin, n.confDir)
	confPath := filepath.Join(dir, "config.toml")
	crictlConf := fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n", c.socket, c.socket)
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.cfg, []byte(crictlConf), 0o644); err != nil {
		t.Fatal(err)
	}

	c.cmd = n.NS.Command("containerd", "--config", confPath)
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	// Pdeathsig fires when the thread that forked the child exits, not the
	// process: fork from a locked goroutine that lives as long as the child.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := c.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	t.Cleanup(c.cleanup)

	nstest.Eventually(t, 20*time.Second, func() bool {
		c.checkAlive()
		out, err := c.crictlOutput("info")
		if err != nil {
			return false
		}
		var info struct {
			Status struct {
				Conditions []struct {
					Type   string `json:"type"`
					Status bool   `json:"status"`
				} `json:"conditions"`
			} `json:"status"`
		}
		if json.Unmarshal(out, &info) != nil {
			return false
		}
		for _, cond := range info.Status.Conditions {
			if cond.Type == "NetworkReady" {
				return cond.Status
			}
		}
		return false
	}, "containerd CRI never reported NetworkReady:\n%s", c.logs)
	c.importImage()
	return c
}

// checkAlive fails the test at once if containerd has exited.
func (c *containerd) checkAlive() {
	select {
	case <-c.done:
		c.t.Fatalf("containerd exited: %v\n%s", c.cmd.ProcessState, c.logs)
	default:
	}
}

// importImage packs the pause image and loads it with ctr, then waits for
// CRI's image store to have it: CRI learns of imports from events, and a
// sandbox started before then would try to pull it from a registry.
func (c *containerd) importImage() {
	t := c.t
	t.Helper()
	tar := filepath.Join(c.dir, "pause.tar")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := ociimage.PackPause(ctx, tar, ociimage.PauseRef); err != nil {
		t.Fatalf("pack pause image: %v", err)
	}
	if out, err := exec.CommandContext(ctx, "ctr", "--address", c.socket, "-n", "k8s.io",
		"images", "import", tar).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v\n%s\ncontainerd log:\n%s", err, out, c.logs)
	}
	nstest.Eventually(t, 10*time.Second, func() bool {
		_, err := c.crictlOutput("inspecti", ociimage.PauseRef)
		return err == nil
	}, "CRI does not list %s after the import", ociimage.PauseRef)
}

// crictlOutput runs crictl against this containerd and returns stdout.
func (c *containerd) crictlOutput(args ...string) ([]byte, error) {
	cmd := exec.Command(c.crictl, append([]string{"--config", c.cfg}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("crictl %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}

// crictlRun runs crictl and fails the test on error.
func (c *containerd) crictlRun(args ...string) string {
	c.t.Helper()
	out, err := c.crictlOutput(args...)
	if err != nil {
		c.t.Fatalf("%v\ncontainerd log:\n%s", err, c.logs)
	}
	return strings.TrimSpace(string(out))
}

// cleanup tears down whatever the test left: pods (so CNI DEL runs while
// the agent is still up), containerd itself, shims, mounts and pod netns.
func (c *containerd) cleanup() {
	t := c.t
	select {
	case <-c.done:
	default:
		if out, err := c.crictlOutput("rmp", "--all", "--force"); err != nil {
			t.Logf("cleanup: %v %s", err, out)
		}
		c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			t.Errorf("containerd did not exit on SIGTERM; killing it")
			c.cmd.Process.Kill()
			<-c.done
		}
	}
	if t.Failed() {
		t.Logf("containerd log:\n%s", c.logs)
	}
	c.killShims()
	unmountUnder(t, c.dir)
	c.removeCgroups()
	for id, path := range c.sandboxes {
		if _, err := os.Stat(path); err == nil {
			t.Errorf("pod netns %s left behind; removing it", path)
			unix.Unmount(path, unix.MNT_DETACH)
			os.Remove(path)
		}
		// containerd 1.6 has no setting for libcni's cache dir; a DEL that
		// never ran leaves the results there.
		for _, f := range cniCacheEntries(id) {
			t.Logf("cleanup: removing CNI cache %s", f)
			os.Remove(f)
		}
	}
}

// cniCacheEntries are libcni's cached results for a container, in the
// default cache dir containerd's CRI uses.
func cniCacheEntries(containerID string) []string {
	m, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", "*-"+containerID+"-*"))
	return m
}

// runPod runs a pod sandbox from a crictl pod config and returns its id and
// the netns path containerd made for it, read from the sandbox's runtime
// spec.
func (c *containerd) runPod(podConfig string) (id, netnsPath string) {
	c.t.Helper()
	id = c.crictlRun("runp", podConfig)
	out := c.crictlRun("inspectp", "--output", "json", id)
	var sb struct {
		Info struct {
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct {
						Type string `json:"type"`
						Path string `json:"path"`
					} `json:"namespaces"`
				} `json:"linux"`
			} `json:"runtimeSpec"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &sb); err != nil {
		c.t.Fatalf("inspectp %s: %v\n%s", id, err, out)
	}
	for _, ns := range sb.Info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" && ns.Path != "" {
			c.sandboxes[id] = ns.Path
			return id, ns.Path
		}
	}
	c.t.Fatalf("inspectp %s: no network namespace path:\n%s", id, out)
	return "", ""
}

// killShims kills the runc shims (and the sandboxes' init processes) that
// this containerd started. Shims daemonize, so they outlive containerd when
// a pod was not removed; they are found by the containerd address on their
// command line, never by name alone.
func (c *containerd) killShims() {
	bundles, _ := filepath.Glob(filepath.Join(c.dir, "state", "io.containerd.runtime.v2.task", "*", "*"))
	for _, b := range bundles {
		if pid, err := readInt(filepath.Join(b, "init.pid")); err == nil && pid > 1 {
			c.t.Logf("cleanup: killing sandbox init %d (%s)", pid, b)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if !strings.HasSuffix(args[0], "containerd-shim-runc-v2") || !containsPair(args, "-address", c.socket) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		c.t.Logf("cleanup: killing shim %d %v", pid, args)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// A killed shim leaves its socket under /run/containerd/s, outside our
	// dirs; the bundle's address file names it.
	for _, b := range bundles {
		addr, err := os.ReadFile(filepath.Join(b, "address"))
		if sock, ok := strings.CutPrefix(strings.TrimSpace(string(addr)), "unix://"); err == nil && ok {
			os.Remove(sock)
		}
	}
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// removeCgroups removes the sandboxes' cgroups (runc removes each on a
// clean delete) and their parent, in every hierarchy: v1 mounts each
// controller under /sys/fs/cgroup/<name>, v2 is /sys/fs/cgroup itself.
func (c *containerd) removeCgroups() {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + c.cgroupParent)
	dirs = append(dirs, "/sys/fs/cgroup"+c.cgroupParent)
	for _, d := range dirs {
		subs, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, s := range subs {
			if s.IsDir() {
				c.rmdirCgroup(filepath.Join(d, s.Name()))
			}
		}
		c.rmdirCgroup(d)
	}
}

// rmdirCgroup removes an empty cgroup; a process killed a moment ago may
// keep it busy until the kernel has finished its exit.
func (c *containerd) rmdirCgroup(dir string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || err == unix.ENOENT {
			return
		}
		if err != unix.EBUSY || time.Now().After(deadline) {
			c.t.Errorf("remove cgroup %s: %v", dir, err)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func containsPair(args []string, key, value string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == key && args[i+1] == value {
			return true
		}
	}
	return false
}

// unmountUnder lazily unmounts every mount point below dir, deepest first
// (overlay rootfs, sandbox /dev/shm), so the dir can be removed.
func unmountUnder(t *testing.T, dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Errorf("read mountinfo: %v", err)
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, mp := range points {
		t.Logf("cleanup: unmounting %s", mp)
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mp, err)
		}
	}
}

// unescapeMountinfo undoes the octal escapes (\040 for space, ...) the
// kernel writes in mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ensureCrictl builds crictl once into the cache dir outside the repo and
// returns its path.
func ensureCrictl(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("SLUICE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatalf("no SLUICE_CACHE and no home dir: %v", err)
		}
		cache = filepath.Join(home, ".cache", "sluice")
	}
	gobin := filepath.Join(cache, "tools", "crictl-"+crictlVersion)
	bin := filepath.Join(gobin, "crictl")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "sigs.k8s.io/cri-tools/cmd/crictl@"+crictlVersion)
	cmd.Dir = os.TempDir() // outside the module: @version installs ignore go.mod anyway
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build crictl %s: %v\n%s", crictlVersion, err, out)
	}
	return bin
}
