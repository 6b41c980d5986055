package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// The kubelet's probes of an ambient pod, and only the kubelet's, are
// SNATed past ztunnel (--probe-snat-uid auto). The agent's host netns is
// the test's node netns; a "kubelet" there is a copy of this test binary
// named kubelet, running as uid 4321, and other local users are copies
// named dialer. With no kubelet at the agent's start nothing is SNATed
// (root's connection is captured too); the kubelet that appears is
// followed, and so is a kubelet restarted under another uid, whose old uid
// then passes no more.
func TestProbeSNATOnlyForTheKubelet(t *testing.T) {
	n := newNode(t)
	bins := dialerCopies(t)
	zsock := filepath.Join(t.TempDir(), "ztunnel", "ztunnel.sock")
	a := n.startAgent("--ambient", "--default-mode", "ambient", "--host-netns", n.NS.Path, "--ztunnel-socket", zsock,
		"--resync-interval", "200ms")
	z := connectZDS(t, zsock)
	if req, _ := z.next(); req.GetSnapshotSent() == nil {
		t.Fatalf("first message %v, want an empty snapshot", req)
	}
	pod := n.Pod("probed")
	c := n.cni(n.conflist("1.1.0", ""))
	type addResult struct {
		res *current.Result
		err error
	}
	added := make(chan addResult, 1)
	go func() {
		res, err := c.Add(rt("probed1", pod))
		if err == nil {
			r, cerr := current.NewResultFromResult(res)
			added <- addResult{r, cerr}
			return
		}
		added <- addResult{nil, err}
	}()
	z.next()
	ar := <-added
	if ar.err != nil {
		t.Fatalf("ADD: %v", ar.err)
	}
	var v4, v6 string
	for _, ip := range ar.res.IPs {
		if ip.Address.IP.To4() != nil {
			v4 = net.JoinHostPort(ip.Address.IP.String(), "8080")
		} else {
			v6 = net.JoinHostPort(ip.Address.IP.String(), "8080")
		}
	}
	// The bridge's IPv6 address, the pod's gateway, is usable once DAD is done.
	nstest.Eventually(t, 10*time.Second, func() bool {
		return !strings.Contains(n.NS.Run(t, "ip", "-6", "addr", "show", "dev", "cni0"), "tentative")
	}, "cni0's IPv6 addresses stayed tentative")
	serveSource(t, pod, "8080")
	ztunnel := startProxy(t, pod, "15006")
	const probed = "app from 169.254.7.127"
	probedV6 := "app from fd16:9254:7127:1337:ffff:ffff:ffff:ffff"
	captured := func(who, addr, got string) {
		t.Helper()
		if got != "proxied" {
			t.Fatalf("%s to %s reached %q, want ztunnel (captured)", who, addr, got)
		}
		ztunnel.expect(t, addr)
	}
	rule := lazy(func() string {
		return n.NS.Run(t, "nft", "list", "chain", "inet", "sluice-host", "postrouting")
	})

	// No kubelet: nothing passes, root's connection included.
	if strings.Contains(rule(), "snat") || len(a.Logs.Lines("kubelet not found")) != 1 {
		t.Fatalf("no kubelet at start, but the host table SNATs or the agent did not say so:\n%s\n%s", rule(), a.Logs)
	}
	got, err := dialFrom(t, n.NS, v4)
	if err != nil {
		t.Fatal(err)
	}
	captured("root with no kubelet", v4, strings.TrimSpace(got))

	kubelet := startDialer(t, n.NS, bins.kubelet, 4321)
	nstest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(rule(), "meta skuid 4321 ") },
		"the host table never took the kubelet's uid 4321:\n%s", rule)
	if got := kubelet.dial(v4); got != probed {
		t.Fatalf("the kubelet's probe reached %q, want %q", got, probed)
	}
	if got := kubelet.dial(v6); got != probedV6 {
		t.Fatalf("the kubelet's v6 probe reached %q, want %q", got, probedV6)
	}
	for _, addr := range []string{v4, v6} {
		captured("uid 4322", addr, dialOnce(t, n.NS, bins.dialer, 4322, addr))
		got, err := dialFrom(t, n.NS, addr)
		if err != nil {
			t.Fatal(err)
		}
		captured("root", addr, strings.TrimSpace(got))
	}

	// The kubelet restarts as another user.
	kubelet.stop()
	kubelet = startDialer(t, n.NS, bins.kubelet, 4323)
	nstest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(rule(), "meta skuid 4323 ") },
		"the host table never followed the kubelet to uid 4323:\n%s", rule)
	if got := kubelet.dial(v4); got != probed {
		t.Fatalf("the restarted kubelet's probe reached %q, want %q", got, probed)
	}
	captured("uid 4321, the kubelet's old uid", v4, dialOnce(t, n.NS, bins.dialer, 4321, v4))
}

// lazy is text computed when it is formatted.
type lazy func() string

func (l lazy) String() string { return l() }

// serveSource answers every connection in pod on port with the address it
// came from.
func serveSource(t *testing.T, pod *nstest.NS, port string) {
	t.Helper()
	l := listenIn(t, pod, port, "app")
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			src := netip.MustParseAddrPort(c.RemoteAddr().String()).Addr().Unmap()
			fmt.Fprintf(c, "app from %s\n", src)
			c.Close()
		}
	}()
}

// dialerBins are copies of the test binary any uid can run, named as the
// process name (comm) the agent looks for, or not.
type dialerBins struct{ kubelet, dialer string }

func dialerCopies(t *testing.T) dialerBins {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice-e2e-dialer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	b := dialerBins{kubelet: filepath.Join(dir, "kubelet"), dialer: filepath.Join(dir, "dialer")}
	for _, p := range []string{b.kubelet, b.dialer} {
		if err := os.WriteFile(p, self, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// dialer is a running copy of the test binary in dial-lines mode.
type dialer struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startDialer runs bin in ns as uid (and gid) uid until stop.
func startDialer(t *testing.T, ns *nstest.NS, bin string, uid int) *dialer {
	t.Helper()
	id := strconv.Itoa(uid)
	cmd := ns.Command("setpriv", "--reuid", id, "--regid", id, "--clear-groups", "--", bin, "child", "dial-lines")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &dialer{t: t, cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(d.stop)
	return d
}

// dial asks the dialer to connect to addr and returns the first line the
// other end sent.
func (d *dialer) dial(addr string) string {
	d.t.Helper()
	if _, err := fmt.Fprintln(d.in, addr); err != nil {
		d.t.Fatalf("dialer: %v", err)
	}
	line, err := d.out.ReadString('\n')
	if err != nil {
		d.t.Fatalf("dialer: %v", err)
	}
	return strings.TrimSpace(line)
}

func (d *dialer) stop() {
	if d.cmd.ProcessState != nil {
		return
	}
	d.in.Close()
	d.cmd.Wait()
}

// dialOnce connects once to addr from ns as uid with bin.
func dialOnce(t *testing.T, ns *nstest.NS, bin string, uid int, addr string) string {
	t.Helper()
	d := startDialer(t, ns, bin, uid)
	defer d.stop()
	return d.dial(addr)
}

// dialLines is the child that dials each address read from stdin and
// prints the first line the other end sends (or the error), until EOF.
func dialLines() int {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Println(dialLine(strings.TrimSpace(sc.Text())))
	}
	return 0
}

func dialLine(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(line)
}
