package kernel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/origdst"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// The test topology: a pod netns and a node netns on one veth. The pod's
// default routes point at the node, which owns the "service" addresses on
// its lo, so a connection the pod makes to a service leaves through the
// pod's output path and either lands on a proxy port in the pod or, when
// not captured, on a real server in the node.
const (
	podV4  = "10.250.0.2"
	podV6  = "fd00:250::2"
	nodeV4 = "10.250.0.1"
	nodeV6 = "fd00:250::1"
)

// nodeServices are addresses the node answers on.
var nodeServices = []string{"10.96.0.10/32", "10.96.0.11/32", "10.97.0.10/32", "fd00:96::10/128", "fd00:96::11/128"}

type topology struct {
	pod, node *nstest.NS
}

// newTopology is newNetPair with the sidecar's proxy listeners and the
// app's servers in the pod.
func newTopology(t *testing.T) *topology {
	t.Helper()
	tp := newNetPair(t)
	// Proxy listeners in the pod report the original destination; real
	// servers report only who they are.
	serveTCP(t, tp.pod, "[::]:15001", "proxy-out", true)
	serveTCP(t, tp.pod, "[::]:15006", "proxy-in", true)
	serveTCP(t, tp.pod, "[::]:15053", "dns-proxy-tcp", true)
	// REDIRECT sends local UDP to 127.0.0.1 or ::1; the answer must come
	// from there for conntrack to map it back, as a real DNS proxy's does.
	for _, addr := range []string{"127.0.0.1:15053", "[::1]:15053"} {
		serveUDPAs(t, tp.pod, 1337, addr, "dns-proxy")
	}
	for _, port := range []string{"8080", "9090", "15008", "15020", "15021", "15090"} {
		serveTCP(t, tp.pod, "[::]:"+port, "pod-"+port, false)
	}
	return tp
}

// newNetPair is the pod and node netns on their veth, with the node's
// service addresses and servers; the pod has nothing listening yet.
func newNetPair(t *testing.T) *topology {
	t.Helper()
	tp := &topology{pod: nstest.New(t, "pod"), node: nstest.New(t, "node")}
	nstest.Veth(t, tp.pod, "eth0", []string{podV4 + "/24", podV6 + "/64"}, tp.node, "eth0", []string{nodeV4 + "/24", nodeV6 + "/64"})
	if err := tp.pod.Do(func() error {
		for _, gw := range []string{nodeV4, nodeV6} {
			if err := netlink.RouteAdd(&netlink.Route{Gw: net.ParseIP(gw)}); err != nil {
				return fmt.Errorf("default route via %s: %w", gw, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("pod routes: %v", err)
	}
	if err := tp.node.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		for _, a := range nodeServices {
			addr, err := netlink.ParseAddr(a)
			if err != nil {
				return err
			}
			if err := netlink.AddrAdd(lo, addr); err != nil {
				return fmt.Errorf("add %s: %w", a, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("node service addresses: %v", err)
	}

	for _, port := range []string{"53", "80", "81"} {
		serveTCP(t, tp.node, "[::]:"+port, "node-"+port, false)
	}
	// Bound to the service address: an unbound UDP socket would answer
	// from the veth address and the client's connected socket would drop it.
	serveUDP(t, tp.node, "10.96.0.10:53", "node-dns")
	return tp
}

// serveTCP accepts on addr inside ns and greets each connection with
// "name" or, for a proxy, "name <original destination>". A proxy listener
// is transparent, as Envoy's is with TPROXY, and reads the original
// destination as a proxy does: a connection TPROXY handed over has it as
// its local address, a REDIRECT-ed one from SO_ORIGINAL_DST.
func serveTCP(t *testing.T, ns *nstest.NS, addr, name string, proxy bool) {
	t.Helper()
	var lc net.ListenConfig
	if proxy {
		lc.Control = sockopts(transparent)
	}
	serve(t, ns, lc, addr, func(c net.Conn) {
		greeting := name
		if proxy {
			greeting += " " + originalDst(c.(*net.TCPConn), addr)
		}
		fmt.Fprintln(c, greeting)
	})
}

// serve accepts on addr inside ns and runs handle for each connection,
// closing it afterwards.
func serve(t *testing.T, ns *nstest.NS, lc net.ListenConfig, addr string, handle func(net.Conn)) {
	t.Helper()
	var l net.Listener
	if err := ns.Do(func() (err error) { l, err = lc.Listen(context.Background(), "tcp", addr); return err }); err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns.Name, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				handle(c)
			}()
		}
	}()
}

func originalDst(c *net.TCPConn, listenAddr string) string {
	local := unmapped(c.LocalAddr())
	if _, port, _ := net.SplitHostPort(listenAddr); strconv.Itoa(int(local.Port())) != port {
		return local.String()
	}
	dst, err := origdst.Get(c)
	if err != nil {
		return "error:" + strings.ReplaceAll(err.Error(), " ", "_")
	}
	return dst.String()
}

func unmapped(a net.Addr) netip.AddrPort {
	ap := a.(*net.TCPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// sockopt is one setsockopt on a socket before it binds.
type sockopt func(fd int) error

// transparent lets a socket accept TPROXY-ed connections and bind an
// address that is not local (IP_TRANSPARENT; IPV6_TRANSPARENT is the same
// flag, set through the v6 level for AF_INET6 sockets).
func transparent(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1); err == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_TRANSPARENT, 1)
}

// marked sets SO_MARK, as ztunnel does on its own sockets.
func marked(mark int) sockopt {
	return func(fd int) error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK, mark) }
}

func sockopts(opts ...sockopt) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			for _, o := range opts {
				if err = o(int(fd)); err != nil {
					return
				}
			}
		}); cerr != nil {
			return cerr
		}
		return err
	}
}

// serveUDP answers every datagram on addr inside ns with "name".
func serveUDP(t *testing.T, ns *nstest.NS, addr, name string, opts ...sockopt) {
	t.Helper()
	serveUDPAs(t, ns, -1, addr, name, opts...)
}

// serveUDPAs is serveUDP with a socket owned by uid (none: -1), as the
// sidecar's DNS proxy (pilot-agent, uid 1337) owns its own: the owner
// decides the conntrack zone of its answers. A socket's owner is the
// creating thread's fsuid, and Do's thread is thrown away afterwards.
func serveUDPAs(t *testing.T, ns *nstest.NS, uid int, addr, name string, opts ...sockopt) {
	t.Helper()
	var pc net.PacketConn
	lc := net.ListenConfig{Control: sockopts(opts...)}
	if err := ns.Do(func() (err error) {
		if uid >= 0 {
			unix.Setfsuid(uid)
		}
		pc, err = lc.ListenPacket(context.Background(), "udp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen udp %s in %s: %v", addr, ns.Name, err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(name+"\n"), from)
		}
	}()
}

// dialFrom connects from inside ns as this (root) process.
func dialFrom(t *testing.T, ns *nstest.NS, network, addr string) string {
	t.Helper()
	var line string
	if err := ns.Do(func() (err error) { line, err = exchange(network, addr); return err }); err != nil {
		t.Fatalf("from %s: %v", ns.Name, err)
	}
	return line
}

// dialWith connects from inside ns with d (a source address, socket
// options) and returns the first line the other end sends.
func dialWith(t *testing.T, ns *nstest.NS, d net.Dialer, network, addr string) string {
	t.Helper()
	var line string
	if err := ns.Do(func() error {
		d.Timeout = 3 * time.Second
		c, err := d.Dial(network, addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if strings.HasPrefix(network, "udp") {
			if _, err := c.Write([]byte("q\n")); err != nil {
				return err
			}
		}
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	}); err != nil {
		t.Fatalf("dial %s %s from %s: %v", network, addr, ns.Name, err)
	}
	return strings.TrimSpace(line)
}

// dialAs connects from inside ns in a child process running as uid:gid.
func dialAs(t *testing.T, ns *nstest.NS, uid, gid uint32, network, addr string) string {
	t.Helper()
	return dialAsFrom(t, ns, uid, gid, network, "", addr)
}

// dialAsFrom is dialAs from the local address local ("" for any).
func dialAsFrom(t *testing.T, ns *nstest.NS, uid, gid uint32, network, local, addr string) string {
	t.Helper()
	nsFile, err := os.Open(ns.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer nsFile.Close()
	cmd := exec.Command(childBinary(t))
	cmd.Env = append(os.Environ(), dialEnv+"="+strings.TrimSpace(network+" "+addr+" "+local))
	cmd.ExtraFiles = []*os.File{nsFile} // fd 3 in the child
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: uid, Gid: gid},
		AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN},
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("dial %s %s as %d:%d: %v: %s", network, addr, uid, gid, err, stderr.String())
		}
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

var (
	childOnce sync.Once
	childPath string
	childErr  error
)

// childBinary is a copy of the test binary that other uids can execute:
// go test builds it in a directory only root may enter.
func childBinary(t *testing.T) string {
	t.Helper()
	childOnce.Do(func() {
		var self, dir string
		if self, childErr = os.Executable(); childErr != nil {
			return
		}
		if dir, childErr = os.MkdirTemp("", "sluice-redirect-child-"); childErr != nil {
			return
		}
		cleanups = append(cleanups, func() { os.RemoveAll(dir) })
		if childErr = os.Chmod(dir, 0o755); childErr != nil {
			return
		}
		var data []byte
		if data, childErr = os.ReadFile(self); childErr != nil {
			return
		}
		childPath = filepath.Join(dir, "redirect.test")
		childErr = os.WriteFile(childPath, data, 0o755)
	})
	if childErr != nil {
		t.Fatalf("copy test binary for child processes: %v", childErr)
	}
	return childPath
}

func mustApply(t *testing.T, tp *topology, s redirect.Spec) *redirect.Ruleset {
	t.Helper()
	r, err := redirect.Build(s)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if err := applyIn(tp.pod.Handle(t), r); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return r
}

func expect(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %q, want %q", what, got, want)
	}
}
