// Package nstest gives tests throwaway network namespaces: created per test,
// bind-mounted under the test's temp dir (never /var/run/netns), and removed
// when the test ends, also when it fails.
package nstest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RequireRoot skips t when the test cannot create namespaces. CI runs as
// root, so there these tests always run.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and nftables state")
	}
}

// NS is one test network namespace.
type NS struct {
	Name string
	Path string // an nsfs bind mount
}

// New creates a network namespace with lo up, bind-mounted at dir/name.
// dir defaults to a fresh temp dir of t.
func New(t testing.TB, name string) *NS {
	t.Helper()
	return NewIn(t, t.TempDir(), name)
}

// NewIn is New with the mount point's directory chosen by the caller, for
// tests that need several namespaces under one root.
func NewIn(t testing.TB, dir, name string) *NS {
	t.Helper()
	RequireRoot(t)
	path := filepath.Join(dir, name)
	if err := create(path); err != nil {
		t.Fatalf("create netns %s: %v", path, err)
	}
	ns := &NS{Name: name, Path: path}
	t.Cleanup(func() { ns.remove() })
	if err := ns.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		t.Fatalf("netns %s: set lo up: %v", name, err)
	}
	return ns
}

// create unshares a new netns on a thread that is thrown away afterwards, so
// no goroutine of the test binary is ever left in the wrong namespace.
func create(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind mount: %w", err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

func (ns *NS) remove() {
	_ = unix.Unmount(ns.Path, unix.MNT_DETACH)
	_ = os.Remove(ns.Path)
}

// Handle opens the namespace; the caller closes it.
func (ns *NS) Handle(t testing.TB) netns.NsHandle {
	t.Helper()
	h, err := netns.GetFromPath(ns.Path)
	if err != nil {
		t.Fatalf("open netns %s: %v", ns.Path, err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// Do runs fn on an OS thread inside the namespace. The thread is discarded
// afterwards rather than switched back.
func (ns *NS) Do(fn func() error) error {
	h, err := netns.GetFromPath(ns.Path)
	if err != nil {
		return err
	}
	defer h.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", ns.Path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Go starts fn on a thread inside the namespace and returns at once; for
// servers that must keep running there. Errors entering the netns are fatal.
func (ns *NS) Go(t testing.TB, fn func()) {
	t.Helper()
	h := ns.Handle(t)
	entered := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			entered <- err
			return
		}
		entered <- nil
		fn()
	}()
	if err := <-entered; err != nil {
		t.Fatalf("enter netns %s: %v", ns.Path, err)
	}
}

// Run execs a command inside the namespace (nsenter) and returns its combined
// output; it fails t when the command fails.
func (ns *NS) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := ns.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", name, args, ns.Name, err, out)
	}
	return string(out)
}

// Command builds an exec.Cmd that runs inside the namespace.
func (ns *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + ns.Path, "--", name}, args...)...)
}

// Veth links two namespaces with a veth pair, assigns the addresses (CIDR
// notation, IPv4 or IPv6) and brings both ends up, with IPv6 DAD off so the
// addresses are usable at once.
func Veth(t testing.TB, a *NS, aIf string, aAddrs []string, b *NS, bIf string, bAddrs []string) {
	t.Helper()
	err := a.Do(func() error {
		peer, err := netns.GetFromPath(b.Path)
		if err != nil {
			return err
		}
		defer peer.Close()
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aIf}, PeerName: bIf, PeerNamespace: netlink.NsFd(int(peer))}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s/%s: %w", aIf, bIf, err)
		}
		return configure(aIf, aAddrs)
	})
	if err != nil {
		t.Fatalf("veth in %s: %v", a.Name, err)
	}
	if err := b.Do(func() error { return configure(bIf, bAddrs) }); err != nil {
		t.Fatalf("veth in %s: %v", b.Name, err)
	}
	// The kernel reports carrier through linkwatch, up to a second late, and
	// IPv6 neighbour discovery on a link without carrier fails silently.
	for _, end := range []struct {
		ns *NS
		If string
	}{{a, aIf}, {b, bIf}} {
		if err := end.ns.Do(func() error { return waitReady(end.If) }); err != nil {
			t.Fatalf("veth %s in %s: %v", end.If, end.ns.Name, err)
		}
	}
}

// waitReady waits until the link is operationally up and has a usable IPv6
// link-local address.
func waitReady(ifName string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		link, err := netlink.LinkByName(ifName)
		if err != nil {
			return err
		}
		if link.Attrs().OperState == netlink.OperUp && hasLinkLocal(link) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 5s (operstate %s)", link.Attrs().OperState)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hasLinkLocal(link netlink.Link) bool {
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
			return true
		}
	}
	return false
}

func configure(ifName string, addrs []string) error {
	link, err := netlink.LinkByName(ifName)
	if err != nil {
		return err
	}
	// DAD would hold new IPv6 addresses (link-local included) tentative for
	// seconds; a test link has no duplicates to detect. The kernel uses the
	// larger of "all" and the interface's own value.
	for _, conf := range []string{"all", ifName} {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+conf+"/accept_dad", []byte("0"), 0o644); err != nil {
			return fmt.Errorf("disable DAD on %s: %w", conf, err)
		}
	}
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return err
		}
		addr, err := netlink.ParseAddr(p.String())
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("add %s to %s: %w", a, ifName, err)
		}
	}
	return netlink.LinkSetUp(link)
}

// Eventually polls cond until it holds, failing t with msg after timeout.
// Tests wait on conditions this way, never with a fixed sleep.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Dial connects from inside the namespace. The socket keeps its namespace
// after the thread that made it is gone, so the conn is usable anywhere.
func (ns *NS) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() error {
		var err error
		c, err = net.DialTimeout(network, addr, timeout)
		return err
	})
	return c, err
}
