// Package podns opens a pod's network namespace from the path a container
// runtime passed in CNI_NETNS, and refuses anything that is not one.
//
// The path comes from the caller of a root daemon, so it is hostile until
// proven otherwise. It must lie under a configured root, and is resolved
// beneath that root on a file descriptor (openat2 RESOLVE_BENEATH), so no
// symlink or rename of a path component can lead outside it. It is opened
// with O_PATH, which never blocks (a FIFO put in its place cannot wedge the
// agent), and checked on that descriptor: an nsfs file, a network namespace,
// and not the daemon's own (whose rules would capture the node's traffic).
// Only then is it reopened for use, through the same descriptor.
//
// Resolution is openat2 with RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS; before
// Linux 5.6 a walk of the components that refuses every symlink. The
// namespace type is NS_GET_NSTYPE on the descriptor; the agent's own netns
// is read on a locked thread from /proc/thread-self; the reopen goes
// through /proc/self/fd. /proc/<pid>/ns/net is the one magic link
// admitted, and only under --host-proc.
package podns

import (
	"context"
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
	return o.OpenContext(context.Background(), path)
}

// OpenContext is Open bounded by ctx: the caller gets its answer by ctx's
// deadline whatever the file system does (a hung mount under a root, say);
// a handle that arrives later is closed.
func (o *Opener) OpenContext(ctx context.Context, path string) (netns.NsHandle, error) {
	if err := ctx.Err(); err != nil {
		return netns.None(), fmt.Errorf("open netns %q: %w", path, err)
	}
	type result struct {
		h   netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := o.open(path)
		done <- result{h, err}
	}()
	select {
	case r := <-done:
		return r.h, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				r.h.Close()
			}
		}()
		return netns.None(), fmt.Errorf("open netns %q: %w", path, ctx.Err())
	}
}

func (o *Opener) open(path string) (netns.NsHandle, error) {
	pfd, err := o.openPath(path)
	if err != nil {
		return netns.None(), err
	}
	defer unix.Close(pfd)
	return o.reopen(path, pfd)
}

// reopen checks the O_PATH descriptor pfd, opened for path, and opens the
// namespace it holds for use.
func (o *Opener) reopen(path string, pfd int) (netns.NsHandle, error) {
	if err := o.verifyFile(path, pfd); err != nil {
		return netns.None(), err
	}
	// Verified nsfs, so this open cannot block; through the O_PATH
	// descriptor it is the very file checked, whatever the path names now.
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return netns.None(), fmt.Errorf("reopen netns %q: %w", path, err)
	}
	if err := verifyNet(path, fd); err != nil {
		unix.Close(fd)
		return netns.None(), err
	}
	return netns.NsHandle(fd), nil
}

// openPath opens path with O_PATH (never blocks, never reads), enforcing
// the root rules.
func (o *Opener) openPath(path string) (int, error) {
	root, rel, err := o.locate(path)
	if err != nil {
		return -1, err
	}
	if root == "/proc" {
		// /proc/<pid>/ns/net is a magic link to the namespace, which
		// RESOLVE_BENEATH would refuse; the pid form already names one,
		// and procfs has no component a caller can swap.
		fd, err := unix.Open(filepath.Join(o.HostProc, rel), unix.O_PATH|unix.O_CLOEXEC, 0)
		return fd, openErr(path, root, err)
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, openErr(path, root, err)
	}
	defer unix.Close(rfd)
	fd, err := openBeneath(rfd, rel)
	return fd, openErr(path, root, err)
}

func openErr(path, root string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("open netns %q: %w", path, ErrNotExist)
	case errors.Is(err, unix.EXDEV):
		return &RuleError{path, "resolves outside the netns root " + root}
	case errors.Is(err, unix.ELOOP):
		return &RuleError{path, "a symlink loop or a magic link under the netns root " + root}
	case errors.Is(err, unix.ENOTDIR):
		return &RuleError{path, "a path component is not a directory"}
	}
	var re *RuleError
	if errors.As(err, &re) {
		return err
	}
	return fmt.Errorf("open netns %q: %w", path, err)
}

// locate checks path lexically and splits it into the root it lies under
// and the rest, relative to that root. For the /proc form, rel is
// <pid>/ns/net.
func (o *Opener) locate(path string) (root, rel string, err error) {
	if path == "" {
		return "", "", &RuleError{path, "empty"}
	}
	if !filepath.IsAbs(path) {
		return "", "", &RuleError{path, "not absolute"}
	}
	for _, elem := range strings.Split(path, "/") {
		if elem == ".." {
			return "", "", &RuleError{path, `contains ".."`}
		}
	}
	if pid, ok := procNetPath(path); ok {
		if !o.hasRoot("/proc") {
			return "", "", &RuleError{path, "/proc is not among the netns roots"}
		}
		return "/proc", pid + "/ns/net", nil
	}
	if path == "/proc" || strings.HasPrefix(path, "/proc/") {
		return "", "", &RuleError{path, "under /proc only /proc/<pid>/ns/net is accepted"}
	}
	clean := filepath.Clean(path)
	for _, r := range o.Roots {
		if r == "/proc" {
			continue
		}
		prefix := strings.TrimSuffix(r, "/") + "/"
		if rest, ok := strings.CutPrefix(clean, prefix); ok && rest != "" && len(r) > len(root) {
			root, rel = r, rest
		}
	}
	if root == "" {
		return "", "", &RuleError{path, fmt.Sprintf("not under the netns roots %v", o.Roots)}
	}
	return root, rel, nil
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
	if n, err := strconv.ParseUint(pid, 10, 32); err != nil || n == 0 || strconv.FormatUint(n, 10) != pid {
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

// verifyFile checks the O_PATH descriptor: an nsfs file that is not the
// agent's own namespace. A FIFO, a socket, a device or a regular file fails
// here, before anything could block on opening it.
func (o *Opener) verifyFile(path string, fd int) error {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("statfs netns %q: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat netns %q: %w", path, err)
	}
	if fs.Type != unix.NSFS_MAGIC || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return &RuleError{path, fmt.Sprintf("not a namespace (nsfs) file (mode %#o)", st.Mode&unix.S_IFMT)}
	}
	if st.Dev == o.self.Dev && st.Ino == o.self.Ino {
		return &RuleError{path, "is the agent's own (host) network namespace"}
	}
	return nil
}

// verifyNet checks the opened namespace is a network one: a mount, pid or
// other namespace file also lives on nsfs.
func verifyNet(path string, fd int) error {
	typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil {
		return fmt.Errorf("query namespace type of %q: %w", path, err)
	}
	if typ != unix.CLONE_NEWNET {
		return &RuleError{path, "is not a network namespace"}
	}
	return nil
}
