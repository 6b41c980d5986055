package redirecttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/podns"
)

// Namespaces stands in for podns.Opener: each netns path it knows names a
// regular file in a test's temp dir, and Open returns a real descriptor on
// it, whose inode is the namespace's identity (as Fake keys it). Files are
// kept until the test ends, so an inode is never reused within a test: a
// path Replace-d names a namespace with another inode, as a /proc/<pid>
// path does after pid reuse.
type Namespaces struct {
	dir   string
	mu    sync.Mutex
	n     int
	files map[string]string // netns path → stand-in file
}

// NewNamespaces is an opener that knows no path yet.
func NewNamespaces(t testing.TB) *Namespaces {
	return &Namespaces{dir: t.TempDir(), files: map[string]string{}}
}

// Add makes path name a new namespace and returns its inode.
func (n *Namespaces) Add(path string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.n++
	file := filepath.Join(n.dir, "ns-"+strconv.Itoa(n.n))
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		panic(fmt.Sprintf("redirecttest: create stand-in netns: %v", err))
	}
	n.files[path] = file
	return fileInode(file)
}

// Replace makes path name another, new namespace (pid reuse) and returns
// its inode.
func (n *Namespaces) Replace(path string) uint64 { return n.Add(path) }

// Alias makes other name the namespace path names, as a second process
// in a pod, or a bind mount, does: it outlives path's Delete.
func (n *Namespaces) Alias(path, other string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.files[other] = n.files[path]
}

// Delete makes path name nothing, as when a pod's netns is torn down.
func (n *Namespaces) Delete(path string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.files, path)
}

// Inode is the inode of the namespace path names now, 0 for none.
func (n *Namespaces) Inode(path string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if f, ok := n.files[path]; ok {
		return fileInode(f)
	}
	return 0
}

// OpenContext is Open, refused once ctx is done, as podns.Opener's is.
func (n *Namespaces) OpenContext(ctx context.Context, path string) (netns.NsHandle, error) {
	if err := ctx.Err(); err != nil {
		return netns.None(), fmt.Errorf("open netns %q: %w", path, err)
	}
	return n.Open(path)
}

// Open answers as podns.Opener does: a handle the caller closes, a
// *podns.RuleError for a path that is not absolute, and podns.ErrNotExist
// for one that names no namespace.
func (n *Namespaces) Open(path string) (netns.NsHandle, error) {
	if !filepath.IsAbs(path) {
		return netns.None(), &podns.RuleError{Path: path, Rule: "not absolute"}
	}
	n.mu.Lock()
	file, ok := n.files[path]
	n.mu.Unlock()
	if !ok {
		return netns.None(), fmt.Errorf("open netns %q: %w", path, podns.ErrNotExist)
	}
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return netns.None(), fmt.Errorf("open netns %q: %w", path, err)
	}
	return netns.NsHandle(fd), nil
}

func fileInode(file string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		panic(fmt.Sprintf("redirecttest: stat stand-in netns: %v", err))
	}
	return st.Ino
}

// Cookie is the stand-in's netns cookie: derived from its inode, which a
// test never sees reused.
func (n *Namespaces) Cookie(ns netns.NsHandle) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(ns), &st); err != nil {
		return 0, fmt.Errorf("stat netns: %w", err)
	}
	return st.Ino | 1<<62, nil
}

// Find answers as podns.Opener's does, searching the paths it knows: the
// first (by name) that names the namespace (ino, cookie), else
// podns.ErrNotExist.
func (n *Namespaces) Find(ino, cookie uint64) (netns.NsHandle, string, error) {
	n.mu.Lock()
	var paths []string
	for p, f := range n.files {
		if fileInode(f) == ino && ino|1<<62 == cookie {
			paths = append(paths, p)
		}
	}
	n.mu.Unlock()
	slices.Sort(paths)
	for _, p := range paths {
		if h, err := n.Open(p); err == nil {
			return h, p, nil
		}
	}
	return netns.None(), "", fmt.Errorf("find netns inode %d: %w", ino, podns.ErrNotExist)
}
