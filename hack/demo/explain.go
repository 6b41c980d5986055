package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// note explains what the reader is looking at.
func note(format string, args ...any) { fmt.Printf("  · "+format+"\n", args...) }

// podB shows the two sides of capture from a second pod: an app's
// connection is captured to pod-b's own :15001, where no proxy listens, so
// it fails instead of leaking around the mesh; the proxy's own uid (1337)
// is left alone, and pod-a captures the connection on the way in.
func (d *demo) podB(ctx context.Context, podB, to string, seen <-chan string) error {
	step("pod-b connects to %s as an app would", to)
	err := dialIn(podB, to)
	if err == nil {
		return fmt.Errorf("pod-b → %s: connected, but pod-b has no proxy on :15001: capture let it through", to)
	}
	fmt.Printf("  pod-b → %s refused: %v\n", to, err)
	note("pod-b is captured too, and no proxy runs in it: its outbound lands on its own :15001, where")
	note("nothing listens. Capture fails closed: no connection gets around the mesh")

	step("pod-b connects to %s as uid 1337, as Envoy itself would", to)
	host, port, _ := net.SplitHostPort(to)
	script := fmt.Sprintf("exec 3<>/dev/tcp/%s/%s && head -c 64 <&3", host, port)
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", podB,
		"setpriv", "--reuid", "1337", "--regid", "1337", "--clear-groups", "bash", "-c", script).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pod-b (uid 1337) → %s: %v: %s", to, err, out)
	}
	select {
	case line := <-seen:
		fmt.Printf("  pod-b (uid 1337) → %s %s\n", to, line)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("pod-b (uid 1337) → %s: pod-a's proxy saw nothing", to)
	}
	note("uid 1337 is exempt from pod-b's outbound capture, so it left pod-b as it was; pod-a's inbound")
	note("rules then sent it to pod-a's :15006, with the original destination intact")
	return nil
}

// operatorView shows what an operator asks the agent: the CLI that ships
// in the agent's image, and its metrics.
func (d *demo) operatorView(ctx context.Context, node string) error {
	agent := filepath.Join(d.bin, "sluice-agent")
	for _, c := range []struct{ args, why string }{
		{"status", "readiness, version, workload counts (exits 1 when not ready)"},
		{"workloads", "every enrolled attachment; POD or CONTAINER is what `get` accepts"},
		{"explain demo/pod-b", "what an ADD would do for a pod, and why"},
		{"explain kube-system/coredns", "an excluded namespace: the plugin passes its pods through"},
	} {
		step("sluice-agent %s — %s", c.args, c.why)
		args := append(strings.Fields(c.args), "--socket", d.socket)
		out, err := exec.CommandContext(ctx, agent, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("sluice-agent %s: %v\n%s", c.args, err, out)
		}
		text, _, cut := strings.Cut(string(out), "\nan ADD would program:")
		indent(text)
		if cut {
			fmt.Println("  | an ADD would program: (the ruleset shown above)")
		}
	}
	step("/metrics on the agent's health address (an excerpt)")
	metrics, err := d.scrape(node)
	if err != nil {
		return err
	}
	keep := regexp.MustCompile(`^sluice_(ready|workloads_enrolled|pods_passed_through_total\{reason="excluded|cni_requests_total\{.*verb="(Add|Status)")`)
	for _, l := range strings.Split(metrics, "\n") {
		if keep.MatchString(l) {
			fmt.Println("  |", l)
		}
	}
	note("docs/operations.md lists every metric and what to alert on")
	return nil
}

// scrape reads /metrics from inside the node netns with a plain HTTP/1.0
// request: the agent's health address is the node's loopback.
func (d *demo) scrape(node string) (string, error) {
	var body string
	err := inNetns(node, func() error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:9890", 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n"); err != nil {
			return err
		}
		b, err := io.ReadAll(c)
		body = string(b)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("scrape /metrics: %w", err)
	}
	return body, nil
}

func indent(s string) {
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		fmt.Println("  |", l)
	}
}

// printKept says what --keep left and how to remove it.
func (d *demo) printKept() {
	step("left running (--keep)")
	agent := filepath.Join(d.bin, "sluice-agent")
	fmt.Printf("  agent pid %d, log %s\n", d.agent.Process.Pid, filepath.Join(d.dir, "agent.log"))
	fmt.Println("  poke around:")
	fmt.Printf("    ip netns exec %s-pod-a nft list table inet sluice\n", d.prefix)
	fmt.Printf("    %s workloads --socket %s\n", agent, d.socket)
	fmt.Printf("    %s get demo/pod-a --socket %s\n", agent, d.socket)
	fmt.Printf("    cat %s\n", filepath.Join(d.confDir(), "10-demo-sluice.conflist"))
	note("the toy proxy ended with the demo: pod-a's captured connections are now refused")
	fmt.Println("  remove it all:")
	fmt.Printf("    make demo DEMO_ARGS=\"--teardown %s\"\n", d.prefix)
}

var keptPrefix = regexp.MustCompile(`^sluice-demo-[0-9]+$`)

// teardownKept removes what a --keep run left: its agent, its network
// namespaces and its temp dir, found by the prefix it printed.
func teardownKept(prefix string) error {
	if !keptPrefix.MatchString(prefix) {
		return fmt.Errorf("--teardown %q: want the sluice-demo-<pid> a --keep run printed", prefix)
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"-*"))
	if len(dirs) == 0 {
		return fmt.Errorf("no demo left by %s in %s", prefix, os.TempDir())
	}
	d := &demo{prefix: prefix, dir: dirs[0]}
	if b, err := os.ReadFile(filepath.Join(d.dir, "agent.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			stopPid(pid)
		}
	}
	for _, name := range []string{prefix + "-node", prefix + "-pod-a", prefix + "-pod-b"} {
		if _, err := os.Stat("/var/run/netns/" + name); err == nil {
			d.namespaces = append(d.namespaces, name)
		}
	}
	d.cleanup()
	return nil
}

// stopPid sends SIGTERM and waits up to 10 seconds before SIGKILL.
func stopPid(pid int) {
	if syscall.Kill(pid, syscall.SIGTERM) != nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}
