package podns

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/internal/netnsthread"
)

// A namespace's inode is not an identity over time: nsfs hands out the
// lowest free number, so a new pod's netns often gets the inode of one
// just freed. The netns cookie (SO_NETNS_COOKIE, Linux 5.14) is never
// reused while the node runs: an enrolment keeps both, and a namespace
// found again by inode is taken for the enrolled one only when its cookie
// matches.

// ErrHeldElsewhere is wrapped when the namespace is alive, and is the one
// enrolled, but only a mount outside the netns roots holds it: it is not
// gone, and it cannot be opened by the rules.
var ErrHeldElsewhere = errors.New("network namespace alive, held only outside the netns roots")

// Cookie returns the netns cookie of ns, read from a socket made inside
// it; 0 when the kernel has none (before 5.14).
func (o *Opener) Cookie(ns netns.NsHandle) (uint64, error) {
	var cookie uint64
	err := netnsthread.Do(ns, func() error {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		defer unix.Close(fd)
		v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		if errors.Is(err, unix.ENOPROTOOPT) {
			return nil
		}
		cookie = v
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read netns cookie: %w", err)
	}
	return cookie, nil
}

// Find opens the namespace with inode ino and cookie cookie through a
// path other than the one it was enrolled by, when that one has gone (the
// process exited, the pid now names another): a process in it (oldest
// first, as /proc/<pid>/ns/net), else an nsfs mount of it. It returns the
// handle and a path Open accepts; ErrHeldElsewhere when the namespace is
// found and is the one, but not under the roots; ErrNotExist when no
// process or mount holds it. A cookie of 0 (unknown) finds nothing: an
// inode alone could be a new pod's.
func (o *Opener) Find(ino, cookie uint64) (netns.NsHandle, string, error) {
	if cookie == 0 {
		return netns.None(), "", fmt.Errorf("find netns inode %d: no cookie to know it by: %w", ino, ErrNotExist)
	}
	held := false
	for _, c := range o.candidates(ino) {
		h, err := o.openCandidate(c, ino, cookie)
		if err != nil {
			continue // gone since the scan, or not ours
		}
		if c.path == "" {
			h.Close()
			held = true
			continue
		}
		return h, c.path, nil
	}
	if held {
		return netns.None(), "", fmt.Errorf("find netns inode %d: %w", ino, ErrHeldElsewhere)
	}
	return netns.None(), "", fmt.Errorf("find netns inode %d: no process or mount holds it: %w", ino, ErrNotExist)
}

// candidate is a place that may hold the namespace: fsPath opens it in the
// agent's view, path is what Open accepts for it ("" when outside the roots).
type candidate struct{ fsPath, path string }

// candidates lists the processes in namespace ino (oldest first), then the
// nsfs mounts of it in the host's and the agent's mount namespaces.
func (o *Opener) candidates(ino uint64) []candidate {
	var out []candidate
	for _, pid := range o.pidsIn(ino) {
		c := candidate{fsPath: filepath.Join(o.HostProc, pid, "ns", "net")}
		if o.hasRoot("/proc") {
			c.path = "/proc/" + pid + "/ns/net"
		}
		out = append(out, c)
	}
	want := "net:[" + strconv.FormatUint(ino, 10) + "]"
	for _, src := range []struct{ mountinfo, root string }{
		{filepath.Join(o.HostProc, "1", "mountinfo"), filepath.Join(o.HostProc, "1", "root")},
		{"/proc/thread-self/mountinfo", "/"},
	} {
		for _, mp := range nsfsMounts(src.mountinfo, want) {
			c := candidate{fsPath: filepath.Join(src.root, mp)}
			if _, _, err := o.locate(mp); err == nil {
				c.path = mp
			}
			out = append(out, c)
		}
	}
	return out
}

// pidsIn lists the processes under HostProc in namespace ino, oldest first.
func (o *Opener) pidsIn(ino uint64) []string {
	entries, err := os.ReadDir(o.HostProc)
	if err != nil {
		return nil
	}
	type found struct {
		pid   string
		start uint64
	}
	var in []found
	for _, e := range entries {
		if _, err := strconv.ParseUint(e.Name(), 10, 32); err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join(o.HostProc, e.Name(), "ns", "net"), &st) != nil ||
			st.Dev != o.self.Dev || st.Ino != ino {
			continue
		}
		start, err := startTime(filepath.Join(o.HostProc, e.Name(), "stat"))
		if err != nil {
			continue
		}
		in = append(in, found{e.Name(), start})
	}
	slices.SortFunc(in, func(a, b found) int { return cmp.Compare(a.start, b.start) })
	out := make([]string, len(in))
	for i, f := range in {
		out[i] = f.pid
	}
	return out
}

// nsfsMounts returns the mount points in a mountinfo file of the nsfs
// mounts whose root is want ("net:[<inode>]").
func nsfsMounts(mountinfo, want string) []string {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields := strings.Fields(pre)
		if !ok || len(fields) < 5 || fields[3] != want || !strings.HasPrefix(post, "nsfs ") {
			continue
		}
		out = append(out, unescapeMount(fields[4]))
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// openCandidate opens c and keeps it only when it is the namespace
// (ino, cookie).
func (o *Opener) openCandidate(c candidate, ino, cookie uint64) (netns.NsHandle, error) {
	pfd, err := unix.Open(c.fsPath, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return netns.None(), err
	}
	h, err := o.reopen(c.fsPath, pfd)
	unix.Close(pfd)
	if err != nil {
		return netns.None(), err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(h), &st); err != nil || st.Ino != ino {
		h.Close()
		return netns.None(), fmt.Errorf("netns %s is not inode %d", c.fsPath, ino)
	}
	got, err := o.Cookie(h)
	if err != nil || got != cookie {
		h.Close()
		return netns.None(), fmt.Errorf("netns %s is inode %d, but not the namespace with cookie %d", c.fsPath, ino, cookie)
	}
	return h, nil
}
