package nodetest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupHierarchies are the mount points of every cgroup hierarchy: each
// v1 controller's and the v2 one (on this VM a hybrid: v1 controllers plus
// an empty unified tree).
func cgroupHierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := indexOf(fields, "-")
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		if fs := fields[sep+1]; fs == "cgroup" || fs == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup hierarchy mounted")
	}
	return out, sc.Err()
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// makeCgroups creates the node's cgroup root, the kubelet's cgroupRoot,
// in every hierarchy, and a "system" child for the node's daemons. cpuset
// children start with no CPUs and no memory nodes, so they get the
// parent's.
func (c *Cluster) makeCgroups() error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	c.hierarchies = hs
	for _, h := range hs {
		for _, d := range []string{c.cgroup, c.cgroup + "/system"} {
			dir := filepath.Join(h, d)
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("create cgroup: %w", err)
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
					if err != nil {
						return fmt.Errorf("read cpuset: %w", err)
					}
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return fmt.Errorf("write cpuset: %w", err)
					}
				}
			}
		}
	}
	return nil
}

// joinCgroups is shell that moves pid into the node's system cgroup in
// every hierarchy, so all the node's processes and their children are
// found there at teardown.
func (c *Cluster) joinCgroups(pid string) string {
	var b strings.Builder
	for _, h := range c.hierarchies {
		fmt.Fprintf(&b, "echo %s > %s/%s/system/cgroup.procs\n", pid, h, c.cgroup)
	}
	return b.String()
}

// cgroupPIDs are the processes in the node's cgroup tree, in any
// hierarchy.
func (c *Cluster) cgroupPIDs() []int {
	seen := map[int]bool{}
	for _, h := range c.hierarchies {
		_ = filepath.Walk(filepath.Join(h, c.cgroup), func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || info.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

// killCgroups SIGKILLs everything in the node's cgroups until none is left.
func (c *Cluster) killCgroups(deadline time.Duration) error {
	end := time.Now().Add(deadline)
	for {
		pids := c.cgroupPIDs()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("processes still in cgroup %s after SIGKILL: %v", c.cgroup, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeCgroups removes the node's cgroup trees, deepest first. A process
// killed a moment ago can keep its cgroup busy until its exit completes.
func (c *Cluster) removeCgroups(deadline time.Duration) error {
	var dirs []string
	for _, h := range c.hierarchies {
		_ = filepath.Walk(filepath.Join(h, c.cgroup), func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		end := time.Now().Add(deadline)
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(end) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// cgroupPrefix starts every node's cgroup name; the name ends in the PID of
// the process that owns the cluster.
const cgroupPrefix = "sluice-node-"

// reapOrphans removes what is left of clusters whose owner died without
// tearing down (a test binary killed by its timeout): their direct
// children die with it (Pdeathsig), but containerd's shims and the
// containers live on in the node's cgroups. Only cgroups with this
// package's prefix whose owner PID is gone are touched.
func reapOrphans() {
	hs, err := cgroupHierarchies()
	if err != nil {
		return
	}
	names := map[string]bool{}
	for _, h := range hs {
		m, _ := filepath.Glob(filepath.Join(h, cgroupPrefix+"*"))
		for _, d := range m {
			names[filepath.Base(d)] = true
		}
	}
	for name := range names {
		i := strings.LastIndex(name, "-")
		owner, err := strconv.Atoi(name[i+1:])
		if err != nil || owner <= 0 || syscall.Kill(owner, 0) == nil {
			continue // not ours, or its owner still runs
		}
		orphan := &Cluster{cgroup: name, hierarchies: hs}
		_ = orphan.killCgroups(10 * time.Second)
		_ = orphan.removeCgroups(5 * time.Second)
	}
}
