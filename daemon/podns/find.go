package podns

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrPodNetnsNotFound is wrapped when no process of the pod could be found
// in a network namespace of its own.
var ErrPodNetnsNotFound = errors.New("pod network namespace not found")

// FindPodNetns locates the network namespace of a pod that is already
// running, for pods whose CNI ADD the agent never saw. It returns the
// runtime-style path /proc/<pid>/ns/net (to be opened through an Opener
// with the same hostProc) of a process of the pod whose netns is not the
// agent's own.
//
// It looks first for a process whose cgroup path names the pod (pod<uid>
// under the cgroupfs driver, pod<uid with _ for -> under systemd), then,
// when that finds nothing, for a namespace holding one of podIPs on an
// interface. Of several processes in the namespace it picks the one that
// started first — the sandbox's pause process where there is one — as it
// lives as long as the namespace, so the path stays valid the longest.
func FindPodNetns(hostProc, podUID string, podIPs []netip.Addr) (string, error) {
	if podUID == "" && len(podIPs) == 0 {
		return "", errors.New("find pod netns: neither a pod uid nor an IP to look for")
	}
	self, err := ownNetns()
	if err != nil {
		return "", err
	}
	want := make([]netip.Addr, 0, len(podIPs))
	for _, ip := range podIPs {
		want = append(want, ip.Unmap())
	}
	procs, unreadable, err := scanProcs(hostProc, self)
	if err != nil {
		return "", err
	}
	if podUID != "" {
		if p, ok := byCgroup(procs, podUID); ok {
			return p.path(), nil
		}
	}
	p, ok, err := byIP(procs, want)
	if err != nil {
		return "", err
	}
	if ok {
		return p.path(), nil
	}
	return "", fmt.Errorf("find netns of pod %s: no process under %s in a cgroup naming pod%s or pod%s, and none of %d pod network namespaces holds any of %v (%d processes' ns/net not readable: that needs CAP_SYS_PTRACE): %w",
		podUID, hostProc, podUID, systemdUID(podUID), len(distinctNetns(procs)), want, unreadable, ErrPodNetnsNotFound)
}

// proc is one process outside the agent's netns.
type proc struct {
	pid     int
	start   uint64 // clock ticks after boot (field 22 of stat)
	ns      nsID
	cgroups string // the whole /proc/<pid>/cgroup file
	netPath string // its ns/net under hostProc
}

func (p proc) path() string { return "/proc/" + strconv.Itoa(p.pid) + "/ns/net" }

type nsID struct{ dev, ino uint64 }

// ownNetns reads the agent's netns on a locked thread: /proc/self names the
// main thread, which Go may have parked in another netns.
func ownNetns() (nsID, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return nsID{}, fmt.Errorf("stat own netns: %w", err)
	}
	return nsID{st.Dev, st.Ino}, nil
}

// scanProcs lists the processes under hostProc that are not in the agent's
// netns (host-network pods and the node's daemons are never a pod's netns),
// oldest first. Processes that exit during the scan, and kernel threads,
// are skipped; unreadable counts those whose ns/net the kernel refused:
// reading another process's namespace link needs ptrace read access,
// which a pod's process (its capabilities not a subset of the agent's)
// grants only to CAP_SYS_PTRACE.
func scanProcs(hostProc string, self nsID) (out []proc, unreadable int, err error) {
	entries, err := os.ReadDir(hostProc)
	if err != nil {
		return nil, 0, fmt.Errorf("find pod netns: list processes in %s: %w", hostProc, err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		p := proc{pid: pid, netPath: filepath.Join(hostProc, e.Name(), "ns", "net")}
		var st unix.Stat_t
		if err := unix.Stat(p.netPath, &st); err != nil {
			if err == unix.EACCES || err == unix.EPERM {
				unreadable++
			}
			continue
		}
		p.ns = nsID{st.Dev, st.Ino}
		if p.ns == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join(hostProc, e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		p.cgroups = string(b)
		if p.start, err = startTime(filepath.Join(hostProc, e.Name(), "stat")); err != nil {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b proc) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.pid, b.pid))
	})
	return out, unreadable, nil
}

// startTime is field 22 of /proc/<pid>/stat. The command name (field 2)
// may hold spaces and parentheses, so fields are counted after its last ')'.
func startTime(statPath string) (uint64, error) {
	b, err := os.ReadFile(statPath)
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no command name", statPath)
	}
	// After ")" come fields 3, 4, ...: start time is the 20th of them.
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("%s: %d fields after the command name", statPath, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// byCgroup returns the oldest process whose cgroup path names the pod.
func byCgroup(procs []proc, uid string) (proc, bool) {
	needles := []string{"pod" + uid, "pod" + systemdUID(uid)}
	for _, p := range procs {
		for _, line := range strings.Split(p.cgroups, "\n") {
			// hierarchy-ID:controllers:path
			parts := strings.SplitN(line, ":", 3)
			if len(parts) == 3 && namesPod(parts[2], needles) {
				return p, true
			}
		}
	}
	return proc{}, false
}

// systemdUID is the uid as the systemd cgroup driver writes it into slice
// names, where '-' separates the hierarchy.
func systemdUID(uid string) string { return strings.ReplaceAll(uid, "-", "_") }

// namesPod reports whether a cgroup path holds one of needles as a whole
// word: pod<uid> followed by '/', '.', or the end, never by more of a
// longer name.
func namesPod(path string, needles []string) bool {
	for _, n := range needles {
		for rest := path; ; {
			i := strings.Index(rest, n)
			if i < 0 {
				break
			}
			rest = rest[i+len(n):]
			if rest == "" || rest[0] == '/' || rest[0] == '.' {
				return true
			}
		}
	}
	return false
}

// distinctNetns keeps the oldest process of each netns.
func distinctNetns(procs []proc) []proc {
	seen := map[nsID]bool{}
	var out []proc
	for _, p := range procs {
		if !seen[p.ns] {
			seen[p.ns] = true
			out = append(out, p)
		}
	}
	return out
}

// byIP returns the oldest process of the netns holding one of ips on an
// interface. Each netns is queried through a netlink socket opened inside
// it, so no thread of the agent ever changes namespace.
func byIP(procs []proc, ips []netip.Addr) (proc, bool, error) {
	if len(ips) == 0 {
		return proc{}, false, nil
	}
	candidates := distinctNetns(procs)
	var errs []error
	for _, p := range candidates {
		ok, err := holdsIP(p.netPath, ips)
		if err != nil {
			// A process gone since the scan, or a netns we may not enter:
			// the pod's is among the others.
			errs = append(errs, err)
			continue
		}
		if ok {
			return p, true, nil
		}
	}
	if len(errs) > 0 && len(errs) == len(candidates) {
		return proc{}, false, fmt.Errorf("find pod netns by IP: every netns failed: %w", errors.Join(errs...))
	}
	return proc{}, false, nil
}

func holdsIP(netPath string, ips []netip.Addr) (bool, error) {
	ns, err := netns.GetFromPath(netPath)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", netPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return false, fmt.Errorf("netlink in %s: %w", netPath, err)
	}
	defer h.Close()
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return false, fmt.Errorf("list addresses in %s: %w", netPath, err)
	}
	for _, a := range addrs {
		got, ok := netip.AddrFromSlice(a.IP)
		if ok && slices.Contains(ips, got.Unmap()) {
			return true, nil
		}
	}
	return false, nil
}
