// Command demo shows sluice's whole core path on one machine with no
// cluster: network namespaces as a node and two pods, the reference bridge
// and host-local plugins plus sluice run through libcni, sluice-agent in
// standalone mode, a toy proxy, and requests that visibly land on it.
// Everything it creates is uniquely named and removed on exit, also on
// Ctrl-C. Run it with `make demo` (as root).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/origdst"
)

func main() {
	bin := flag.String("bin", "bin", "directory with sluice and sluice-agent")
	plugins := flag.String("plugins", "", "directory with the reference bridge, host-local and loopback plugins")
	keep := flag.Bool("keep", false, "leave the namespaces and the agent running for poking around; prints the command that removes them")
	teardown := flag.String("teardown", "", "remove what `--keep` left, by the prefix it printed (sluice-demo-<pid>)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fail(errors.New("run as root: the demo creates network namespaces"))
	}
	if *teardown != "" {
		if err := teardownKept(*teardown); err != nil {
			fail(err)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{bin: abs(*bin), plugins: abs(*plugins), prefix: fmt.Sprintf("sluice-demo-%d", os.Getpid()), keep: *keep}
	err := d.run(ctx)
	if err == nil && d.keep {
		d.printKept()
		return
	}
	d.cleanup()
	if err != nil {
		fail(err)
	}
}

type demo struct {
	bin, plugins, prefix string
	dir                  string
	namespaces           []string
	agent                *exec.Cmd
	socket               string
	keep                 bool
}

func (d *demo) run(ctx context.Context) error {
	var err error
	if d.dir, err = os.MkdirTemp("", d.prefix+"-"); err != nil {
		return err
	}
	d.socket = filepath.Join(d.dir, "run", "agent.sock")
	node, podA, podB := d.prefix+"-node", d.prefix+"-pod-a", d.prefix+"-pod-b"
	step("creating network namespaces %s, %s, %s", node, podA, podB)
	for _, name := range []string{node, podA, podB} {
		if err := d.netnsAdd(name); err != nil {
			return err
		}
	}

	// The primary CNI's config, as a node would have it before sluice.
	if err := os.MkdirAll(d.confDir(), 0o755); err != nil {
		return err
	}
	primary := fmt.Sprintf(`{
  "cniVersion": "1.1.0", "name": "demo",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true,
     "ipam": {"type": "host-local", "dataDir": %q,
              "ranges": [[{"subnet": "10.88.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}}
  ]
}
`, filepath.Join(d.dir, "ipam"))
	if err := os.WriteFile(filepath.Join(d.confDir(), "10-demo.conflist"), []byte(primary), 0o644); err != nil {
		return err
	}

	step("starting sluice-agent (standalone, sidecar mode) in the node netns")
	note("standalone: no Kubernetes, so every pod gets --default-mode (sidecar), as if istiod had injected an Envoy")
	if err := d.startAgent(ctx, node); err != nil {
		return err
	}

	// Its own conflist: the primary's chain plus sluice, sorting just
	// before the primary, which stays as its CNI wrote it.
	step("sluice-agent installed itself: %s", filepath.Join(d.confDir(), "10-demo-sluice.conflist"))
	conf, err := libcni.LoadConfList(d.confDir(), "demo")
	if err != nil {
		return err
	}
	installed, _ := os.ReadFile(filepath.Join(d.confDir(), "10-demo-sluice.conflist"))
	for _, l := range strings.Split(strings.TrimSpace(string(installed)), "\n") {
		fmt.Println("  |", l)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{d.cniBin(), d.plugins}, filepath.Join(d.dir, "cache"), nil)
	ips := map[string]string{}
	var attached []*libcni.RuntimeConf
	defer func() {
		if d.keep {
			return // --keep: the pods stay; teardown removes their netns
		}
		for _, rc := range attached {
			step("CNI DEL %s", rc.ContainerID)
			if err := inNetns(node, func() error { return cni.DelNetworkList(context.Background(), conf, rc) }); err != nil {
				fmt.Fprintln(os.Stderr, "  DEL failed:", err)
			}
		}
	}()
	for _, pod := range []string{podA, podB} {
		rc := &libcni.RuntimeConf{
			ContainerID: strings.TrimPrefix(pod, d.prefix+"-"), NetNS: "/var/run/netns/" + pod, IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "demo"}, {"K8S_POD_NAME", strings.TrimPrefix(pod, d.prefix+"-")}},
		}
		step("CNI ADD %s: bridge + host-local, then sluice", rc.ContainerID)
		var res *current.Result
		err := inNetns(node, func() error {
			r, err := cni.AddNetworkList(ctx, conf, rc)
			if err != nil {
				return err
			}
			res, err = current.NewResultFromResult(r)
			return err
		})
		if err != nil {
			return fmt.Errorf("ADD %s: %w", rc.ContainerID, err)
		}
		attached = append(attached, rc)
		ips[pod] = res.IPs[0].Address.IP.String()
		fmt.Printf("  %s got %s\n", rc.ContainerID, res.IPs[0].Address.String())
	}

	if err := d.showRuleset("pod-a"); err != nil {
		return err
	}
	note("what the rules say, as Istio's sidecar mode has it:")
	note("  outbound TCP from the pod goes to :15001, inbound TCP to :15006 — the ports Envoy listens on")
	note("  traffic of uid 1337 (Envoy's own) is left alone, or Envoy's own connections would loop back into it")
	note("  15008/15020/15021/15090 (HBONE, the agent's status and Envoy's metrics ports) pass inbound untouched")

	step("toy proxy in pod-a listening on :15001 (outbound) and :15006 (inbound), standing in for Envoy")
	seen := make(chan string, 4)
	for _, port := range []string{"15001", "15006"} {
		l, err := listenIn(podA, ":"+port)
		if err != nil {
			return err
		}
		defer l.Close()
		go serveProxy(l, port, seen)
	}

	note("nothing listens on 10.96.0.10 (a typical Service IP, not even routed here): pod-a's connection")
	note("can only succeed if it is captured, and the proxy reports the address the app asked for")
	for _, c := range []struct{ from, fromName, to string }{
		{podA, "pod-a", "10.96.0.10:80"},
		{node, "node", net.JoinHostPort(ips[podA], "8080")},
	} {
		step("%s connects to %s", c.fromName, c.to)
		if err := dialIn(c.from, c.to); err != nil {
			return fmt.Errorf("%s → %s: %w", c.fromName, c.to, err)
		}
		select {
		case line := <-seen:
			fmt.Printf("  %s → %s %s\n", c.fromName, c.to, line)
		case <-time.After(5 * time.Second):
			return fmt.Errorf("%s → %s: the proxy saw nothing", c.fromName, c.to)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := d.podB(ctx, podB, net.JoinHostPort(ips[podA], "8080"), seen); err != nil {
		return err
	}
	return d.operatorView(ctx, node)
}

func (d *demo) netnsAdd(name string) error {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add %s: %v: %s", name, err, out)
	}
	d.namespaces = append(d.namespaces, name)
	return exec.Command("ip", "-n", name, "link", "set", "lo", "up").Run()
}

func (d *demo) startAgent(ctx context.Context, node string) error {
	d.agent = exec.Command("ip", "netns", "exec", node, filepath.Join(d.bin, "sluice-agent"),
		"--socket", d.socket, "--state-dir", filepath.Join(d.dir, "state"),
		"--netns-roots", "/var/run/netns,/run/netns", "--health-addr", "127.0.0.1:9890", "--log-level", "warn",
		"--cni-bin-dir", d.cniBin(), "--cni-conf-dir", d.confDir(), "--plugin-binary", filepath.Join(d.bin, "sluice"))
	d.agent.Stdout, d.agent.Stderr = os.Stdout, os.Stderr
	if d.keep {
		// It outlives the demo: its log goes to a file, and its own
		// process group keeps a Ctrl-C in the terminal from reaching it.
		log, err := os.Create(filepath.Join(d.dir, "agent.log"))
		if err != nil {
			return err
		}
		d.agent.Stdout, d.agent.Stderr = log, log
		d.agent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := d.agent.Start(); err != nil {
		return fmt.Errorf("start sluice-agent: %w", err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, "agent.pid"), []byte(strconv.Itoa(d.agent.Process.Pid)), 0o644); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := d.status(ctx)
		if err == nil && resp.Ready {
			fmt.Println("  agent ready on", d.socket)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sluice-agent not ready after 10s: %v %v", resp, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The demo's own CNI dirs: the agent installs there, never in /opt/cni.
func (d *demo) confDir() string { return filepath.Join(d.dir, "net.d") }
func (d *demo) cniBin() string  { return filepath.Join(d.dir, "cni-bin") }

func (d *demo) client() (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func (d *demo) status(ctx context.Context) (*sluicev1.StatusResponse, error) {
	conn, err := d.client()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return sluicev1.NewCNIClient(conn).Status(ctx, &sluicev1.StatusRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_1})
}

// showRuleset asks the agent (as an operator would with grpcurl) what it
// programmed into the pod.
func (d *demo) showRuleset(containerID string) error {
	conn, err := d.client()
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := sluicev1.NewDebugClient(conn).GetWorkload(context.Background(), &sluicev1.GetWorkloadRequest{ContainerId: containerID})
	if err != nil {
		return fmt.Errorf("Debug.GetWorkload %s: %w", containerID, err)
	}
	step("ruleset in %s (Debug.GetWorkload; drift: %d)", containerID, len(resp.Drift))
	for _, l := range strings.Split(strings.TrimSpace(resp.Ruleset), "\n") {
		fmt.Println("  |", l)
	}
	return nil
}

func (d *demo) cleanup() {
	step("cleaning up")
	if d.agent != nil && d.agent.Process != nil {
		d.agent.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.agent.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			d.agent.Process.Kill()
		}
	}
	for _, name := range d.namespaces {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "  ip netns del %s: %v: %s\n", name, err, out)
		}
	}
	if d.dir != "" {
		os.RemoveAll(d.dir)
	}
}

// inNetns runs fn on a thread inside the named netns; the thread is
// discarded afterwards. Plugins exec'd from it inherit the netns.
func inNetns(name string, fn func() error) error {
	h, err := netns.GetFromName(name)
	if err != nil {
		return err
	}
	defer h.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func listenIn(ns, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNetns(ns, func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

func dialIn(ns, addr string) error {
	return inNetns(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err = c.Read(make([]byte, 64))
		return err
	})
}

func serveProxy(l net.Listener, port string, seen chan<- string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		dst, err := origdst.Get(c.(*net.TCPConn))
		if err != nil {
			seen <- "accepted on :" + port + " but original dst unknown: " + err.Error()
		} else {
			seen <- fmt.Sprintf("captured on :%s (original dst %s)", port, dst)
		}
		c.Write([]byte("hello from the toy proxy\n"))
		c.Close()
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		fail(err)
	}
	return a
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "demo:", err)
	os.Exit(1)
}
