// Package podns opens a pod's network namespace from the path a container
// runtime passed in CNI_NETNS, and refuses anything that is not one.
//
// The path comes from the caller of a root daemon, so it is hostile until
// proven otherwise: it must lie under a configured root after resolving
// symlinks, be an nsfs mount, and not be the daemon's own namespace (whose
// rules would then capture the node's traffic). The checks run on the opened
// file descriptor, so the path cannot be swapped between check and use.
package podns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RuleError says which rule a netns path broke. The gRPC layer turns it into
// InvalidArgument.
type RuleError struct {
	Path string
	Rule string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("netns path %q refused: %s", e.Path, e.Rule)
}

// ErrNotExist is wrapped when the namespace is gone (a pod torn down
// before DEL, say), which callers of DEL treat as success.
var ErrNotExist = os.ErrNotExist

// Opener opens namespace paths under Roots. A root of "/proc" admits the
// runtime's /proc/<pid>/ns/net form, read through HostProc (the host's /proc
// as mounted in the agent's container).
type Opener struct {
	Roots    []string
	HostProc string
	self     unix.Stat_t
}

// NewOpener records the daemon's own netns so it can be refused later.
func NewOpener(roots []string, hostProc string) (*Opener, error) {
	o := &Opener{HostProc: hostProc}
	for _, r := range roots {
		if r == "" {
			continue
		}
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("netns root %q is not absolute", r)
		}
		o.Roots = append(o.Roots, filepath.Clean(r))
	}
	if len(o.Roots) == 0 {
		return nil, errors.New("no netns roots configured")
	}
	// /proc/self names the main thread, which Go may have parked in another
	// netns; an unlocked thread is always in the agent's own.
	runtime.LockOSThread()
	err := unix.Stat("/proc/thread-self/ns/net", &o.self)
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("stat own netns: %w", err)
	}
	return o, nil
}

// Open returns a handle on the namespace at path; the caller closes it.
func (o *Opener) Open(path string) (netns.NsHandle, error) {
	target, err := o.resolve(path)
	if err != nil {
		return netns.None(), err
	}
	fd, err := unix.Open(target, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return netns.None(), fmt.Errorf("open netns %q: %w", path, ErrNotExist)
		}
		return netns.None(), fmt.Errorf("open netns %q: %w", path, err)
	}
	if err := o.verify(path, fd); err != nil {
		unix.Close(fd)
		return netns.None(), err
	}
	return netns.NsHandle(fd), nil
}

// resolve maps path to the file to open, enforcing the root rules.
func (o *Opener) resolve(path string) (string, error) {
	if path == "" {
		return "", &RuleError{path, "empty"}
	}
	if !filepath.IsAbs(path) {
		return "", &RuleError{path, "not absolute"}
	}
	for _, elem := range strings.Split(path, "/") {
		if elem == ".." {
			return "", &RuleError{path, `contains ".."`}
		}
	}
	if pid, ok := procNetPath(path); ok {
		if !o.hasRoot("/proc") {
			return "", &RuleError{path, "/proc is not among the netns roots"}
		}
		// /proc/<pid>/ns/net is a magic link to the namespace: resolving it
		// as a symlink would fail, and the pid form already names one.
		return filepath.Join(o.HostProc, pid, "ns", "net"), nil
	}
	if path == "/proc" || strings.HasPrefix(path, "/proc/") {
		return "", &RuleError{path, "under /proc only /proc/<pid>/ns/net is accepted"}
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("resolve netns %q: %w", path, ErrNotExist)
		}
		return "", &RuleError{path, fmt.Sprintf("cannot be resolved: %v", err)}
	}
	for _, r := range o.Roots {
		if r != "/proc" && strings.HasPrefix(resolved, r+"/") {
			return resolved, nil
		}
	}
	return "", &RuleError{path, fmt.Sprintf("resolves to %q, outside the netns roots %v", resolved, o.Roots)}
}

// procNetPath reports whether path is /proc/<pid>/ns/net with a numeric pid
// (never self or thread-self, which would name the daemon).
func procNetPath(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return "", false
	}
	pid, tail, ok := strings.Cut(rest, "/")
	if !ok || tail != "ns/net" {
		return "", false
	}
	if n, err := strconv.ParseUint(pid, 10, 32); err != nil || n == 0 {
		return "", false
	}
	return pid, true
}

func (o *Opener) hasRoot(root string) bool {
	for _, r := range o.Roots {
		if r == root {
			return true
		}
	}
	return false
}

func (o *Opener) verify(path string, fd int) error {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("statfs netns %q: %w", path, err)
	}
	if fs.Type != unix.NSFS_MAGIC {
		return &RuleError{path, "not a namespace (nsfs) file"}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat netns %q: %w", path, err)
	}
	if st.Dev == o.self.Dev && st.Ino == o.self.Ino {
		return &RuleError{path, "is the agent's own (host) network namespace"}
	}
	// A mount, pid or other namespace file also lives on nsfs.
	typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		return fmt.Errorf("query namespace type of %q: %w", path, err)
	}
	if typ != unix.CLONE_NEWNET {
		return &RuleError{path, "is not a network namespace"}
	}
	return nil
}
