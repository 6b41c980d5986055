package nstest

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

// CgroupHierarchies are the mount points of every cgroup hierarchy: each
// v1 controller's and the v2 one (a hybrid machine has both).
func CgroupHierarchies() ([]string, error) {
	points, _, err := cgroupMounts()
	if err == nil && len(points) == 0 {
		err = errors.New("no cgroup hierarchy mounted")
	}
	return points, err
}

// cgroupMounts are the cgroup hierarchies' mount points and each one's
// fstype (cgroup or cgroup2), in mountinfo's order.
func cgroupMounts() (points, fstypes []string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mount-point ... - fstype source options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, fstype := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(fstype) < 1 {
			continue
		}
		if fstype[0] == "cgroup" || fstype[0] == "cgroup2" {
			points, fstypes = append(points, fields[4]), append(fstypes, fstype[0])
		}
	}
	return points, fstypes, sc.Err()
}

// CgroupPIDs are the processes in the cgroup tree name (a path below each
// hierarchy's root), in any of hierarchies.
func CgroupPIDs(hierarchies []string, name string) []int {
	seen := map[int]bool{}
	for _, h := range hierarchies {
		_ = filepath.Walk(filepath.Join(h, name), func(p string, info os.FileInfo, err error) error {
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

// KillCgroup SIGKILLs everything in the cgroup tree name until none is
// left, or fails after deadline naming who is.
func KillCgroup(hierarchies []string, name string, deadline time.Duration) error {
	end := time.Now().Add(deadline)
	for {
		pids := CgroupPIDs(hierarchies, name)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("processes still in cgroup %s after SIGKILL: %v", name, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RemoveCgroup removes the cgroup tree name in every hierarchy, deepest
// first; one that is gone already is no error. A process killed a moment
// ago keeps its cgroup busy until the kernel has finished its exit, so
// EBUSY is waited out for up to busy a directory.
func RemoveCgroup(hierarchies []string, name string, busy time.Duration) error {
	var dirs []string
	for _, h := range hierarchies {
		_ = filepath.Walk(filepath.Join(h, name), func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	var errs []error
	for _, d := range dirs {
		end := time.Now().Add(busy)
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
