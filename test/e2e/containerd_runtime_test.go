package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/containerdtest"
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

// containerd is the machine's containerd with the CRI plugin
// (containerdtest), isolated from any running there: its own root, state,
// sockets, runc root and config, run inside the node netns so the CNI
// bridge lands there.
type containerd struct {
	*containerdtest.Containerd
	t      *testing.T
	dir    string
	socket string
	// sandboxes maps each pod sandbox run to its netns path; cleanup
	// removes what a failed test left of them.
	sandboxes map[string]string
}

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
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := &containerd{t: t, dir: dir, socket: filepath.Join(dir, "containerd.sock"), sandboxes: map[string]string{}}
	conf := containerdtest.Config{V2: true, Root: filepath.Join(dir, "root"), State: filepath.Join(dir, "state"),
		Socket: c.socket, RuncRoot: filepath.Join(dir, "runc"), CNIBinDirs: []string{n.CNIBin}, CNIConfDir: n.ConfDir}.String()
	c.Containerd = containerdtest.Start(t, containerdtest.Options{
		Dir: dir, Config: conf, Crictl: crictl, Socket: c.socket, Command: n.Command, Reap: c.reap,
	})
	return c
}

// reap removes what containerd left once it has stopped: shims, mounts
// and pod netns (the node removes its pods' cgroup).
func (c *containerd) reap() {
	t := c.t
	c.killShims()
	unmountUnder(t, c.dir)
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
// the netns path containerd made for it.
func (c *containerd) runPod(podConfig string) (id, netnsPath string) {
	c.t.Helper()
	s := c.Inspect(c.MustCrictl("runp", podConfig))
	c.sandboxes[s.ID] = s.Netns
	return s.ID, s.Netns
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
