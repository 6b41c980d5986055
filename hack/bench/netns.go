package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
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

// listenIn opens a TCP listener on 127.0.0.1 (any port) inside the netns at
// path: the socket belongs to that netns however the goroutines using it
// move. The thread that made it is left locked and dies with its goroutine.
func listenIn(path string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{err: err}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			done <- result{err: fmt.Errorf("setns %s: %w", path, err)}
			return
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		done <- result{l, err}
	}()
	r := <-done
	return r.l, r.err
}

// forward relays every connection accepted on l to addr (dialled from this
// process's own netns) until l is closed: how an agent in a node netns
// reaches the API server listening on the machine's loopback.
func forward(l net.Listener, addr string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer up.Close()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			_, _ = io.Copy(c, up)
		}()
	}
}

// addPodInterface gives the netns at path what a primary CNI would have:
// eth0 (one end of a veth pair, both ends inside) up with 10.22.0.5/16, the address in prevResult. istio-cni
// reads the pod's addresses from the netns to pick its IP families.
func addPodInterface(path string) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0-peer"}
	if err := h.LinkAdd(link); err != nil {
		return fmt.Errorf("add eth0: %w", err)
	}
	addr, err := netlink.ParseAddr("10.22.0.5/16")
	if err != nil {
		return err
	}
	if err := h.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("address eth0: %w", err)
	}
	return h.LinkSetUp(link)
}
