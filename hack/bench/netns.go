package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// nsDir holds every network namespace the run makes, as nsfs bind mounts
// in a temp dir (never /var/run/netns). cleanupAll unmounts them on exit,
// on failure and on SIGINT/SIGTERM.
type nsDir struct {
	dir string
	mu  sync.Mutex
	all map[string]bool
}

func newNSDir(dir string) (*nsDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &nsDir{dir: dir, all: map[string]bool{}}, nil
}

// create makes a fresh netns with lo up, bind-mounted at dir/name. The
// unshare happens on a thread that exits with its goroutine, so no thread
// of this process is left in a pod's namespace.
func (d *nsDir) create(name string) (string, error) {
	path := filepath.Join(d.dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return "", err
	}
	f.Close()
	d.mu.Lock()
	d.all[path] = true
	d.mu.Unlock()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		if err := setLoUp(); err != nil {
			errc <- fmt.Errorf("lo up: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		errc <- unix.Mount(src, path, "none", unix.MS_BIND, "")
	}()
	if err := <-errc; err != nil {
		d.remove(path)
		return "", fmt.Errorf("create netns %s: %w", path, err)
	}
	return path, nil
}

// setLoUp brings lo up in the calling thread's netns (SIOCSIFFLAGS).
func setLoUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

func (d *nsDir) remove(path string) {
	_ = unix.Unmount(path, unix.MNT_DETACH)
	_ = os.Remove(path)
	d.mu.Lock()
	delete(d.all, path)
	d.mu.Unlock()
}

func (d *nsDir) cleanupAll() {
	d.mu.Lock()
	paths := make([]string, 0, len(d.all))
	for p := range d.all {
		paths = append(paths, p)
	}
	d.mu.Unlock()
	for _, p := range paths {
		d.remove(p)
	}
}
