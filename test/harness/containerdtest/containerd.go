// Package containerdtest runs a containerd with the CRI plugin for one
// test, in the namespaces of the test's node: it writes its Config, starts
// containerd (proctest), waits until CRI reports its network ready,
// imports the pause image, and at the test's end removes every pod while
// the agent still serves, stops containerd and lets the node reap what
// containerd's shims left. test/e2e runs the machine's containerd 1.x in a
// node netns; test/nri runs containerd 2.x in a node with a mount
// namespace of its own. The test cluster's nodes (nodetest) run the same
// Config, but their containerd is a daemon of the node, started, stopped
// and rebooted with it under the cluster's own supervision (log files,
// the node's cgroup tree), not by a test.
package containerdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/ociimage"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// Options say where containerd runs and with what.
type Options struct {
	// Dir holds the config and, when Pause is "", the packed pause image.
	Dir string
	// Config is containerd's config file's content.
	Config string
	// Bin is the directory of containerd, its runc shim and ctr; containerd
	// runs with it first on PATH, so its own shim is found. "" is the
	// machine's, from PATH.
	Bin string
	// Crictl is crictl's path.
	Crictl string
	// Socket is containerd's gRPC socket, as Command's processes see it.
	Socket string
	// Command is argv in the node's namespaces: containerd, crictl and ctr
	// run through it.
	Command func(ctx context.Context, argv ...string) *exec.Cmd
	// Pause is the pause image's archive (ociimage.PauseRef); "" packs one
	// into Dir.
	Pause string
	// Reap runs at the test's end once containerd has stopped: shims and
	// pause processes daemonize, so the node kills what is left of them.
	Reap func()
}

// Containerd is one running containerd.
type Containerd struct {
	T    testing.TB
	opts Options
	// Logs is its output, across restarts.
	Logs *proctest.Logs
	proc *proctest.Proc
}

// Start runs containerd until the test ends, waits until CRI reports
// NetworkReady (the CNI conf dir loaded) and imports the pause image.
func Start(t testing.TB, opts Options) *Containerd {
	t.Helper()
	c := &Containerd{T: t, opts: opts, Logs: &proctest.Logs{}}
	if err := os.WriteFile(c.config(), []byte(opts.Config), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Run()
	t.Cleanup(c.cleanup)
	nstest.Eventually(t, 30*time.Second, func() bool {
		c.Alive()
		out, err := c.Crictl(t.Context(), "info")
		return err == nil && networkReady(out)
	}, "containerd's CRI never reported NetworkReady:\n%s", c.Logs)
	c.importPause()
	return c
}

func (c *Containerd) config() string { return filepath.Join(c.opts.Dir, "containerd.toml") }

func (c *Containerd) bin(name string) string {
	if c.opts.Bin == "" {
		return name
	}
	return filepath.Join(c.opts.Bin, name)
}

// Run starts containerd (again, after Stop: its pods and shims live on).
func (c *Containerd) Run() {
	argv := []string{c.bin("containerd"), "--config", c.config()}
	if c.opts.Bin != "" {
		argv = append([]string{"env", "PATH=" + c.opts.Bin + ":" + os.Getenv("PATH")}, argv...)
	}
	p, err := proctest.Launch(c.opts.Command(context.Background(), argv...), c.Logs)
	if err != nil {
		c.T.Fatalf("start containerd: %v", err)
	}
	c.proc = p
}

// Stop ends containerd (SIGTERM, SIGKILL after 15 s) and leaves its pods
// running, as a containerd restart does. It reports whether SIGTERM was
// enough.
func (c *Containerd) Stop() bool { return c.proc.Terminate(15 * time.Second) }

// Alive fails the test at once if containerd has exited.
func (c *Containerd) Alive() {
	if c.proc.Exited() {
		c.T.Fatalf("containerd exited: %v\n%s", c.proc.Cmd.ProcessState, c.Logs)
	}
}

// Crictl runs crictl against this containerd, in the node, and returns its
// stdout, trimmed; its stderr goes into the error.
func (c *Containerd) Crictl(ctx context.Context, args ...string) (string, error) {
	sock := "unix://" + c.opts.Socket
	argv := append([]string{c.opts.Crictl, "--runtime-endpoint", sock, "--image-endpoint", sock, "--timeout", "30s"}, args...)
	out, err := c.output(ctx, argv...)
	return strings.TrimSpace(out), err
}

// MustCrictl is Crictl that fails the test on error.
func (c *Containerd) MustCrictl(args ...string) string {
	c.T.Helper()
	out, err := c.Crictl(c.T.Context(), args...)
	if err != nil {
		c.T.Fatalf("%v\ncontainerd log:\n%s", err, c.Logs)
	}
	return out
}

func (c *Containerd) output(ctx context.Context, argv ...string) (string, error) {
	cmd := c.opts.Command(ctx, argv...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, stderr.String())
	}
	return string(out), nil
}

// Sandbox is what inspectp says of a pod sandbox.
type Sandbox struct {
	ID    string
	Netns string // the netns mount containerd made, in the node
	IP    string
}

// Inspect reads a sandbox's IP and netns path (from its runtime spec).
func (c *Containerd) Inspect(id string) Sandbox {
	c.T.Helper()
	out := c.MustCrictl("inspectp", "--output", "json", id)
	var v struct {
		Status struct {
			Network struct {
				IP string `json:"ip"`
			} `json:"network"`
		} `json:"status"`
		Info struct {
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct {
						Type string `json:"type"`
						Path string `json:"path"`
					} `json:"namespaces"`
				} `json:"linux"`
			} `json:"runtimeSpec"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		c.T.Fatalf("inspectp %s: %v\n%s", id, err, out)
	}
	s := Sandbox{ID: id, IP: v.Status.Network.IP}
	for _, ns := range v.Info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" && ns.Path != "" {
			s.Netns = ns.Path
			return s
		}
	}
	c.T.Fatalf("inspectp %s: no network namespace path:\n%s", id, out)
	return s
}

func networkReady(info string) bool {
	var v struct {
		Status struct {
			Conditions []struct {
				Type   string `json:"type"`
				Status bool   `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	}
	if json.Unmarshal([]byte(info), &v) != nil {
		return false
	}
	for _, cond := range v.Status.Conditions {
		if cond.Type == "NetworkReady" {
			return cond.Status
		}
	}
	return false
}

// importPause loads the pause image with ctr and waits until CRI lists it:
// CRI learns of imports from events, and a sandbox started before then
// would try to pull it from a registry.
func (c *Containerd) importPause() {
	t := c.T
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	archive := c.opts.Pause
	if archive == "" {
		archive = filepath.Join(c.opts.Dir, "pause.tar")
		if err := ociimage.PackPause(ctx, archive, ociimage.PauseRef); err != nil {
			t.Fatalf("pack the pause image: %v", err)
		}
	}
	if _, err := c.output(ctx, c.bin("ctr"), "--address", c.opts.Socket, "-n", "k8s.io", "images", "import", archive); err != nil {
		t.Fatalf("import the pause image: %v\ncontainerd log:\n%s", err, c.Logs)
	}
	nstest.Eventually(t, 10*time.Second, func() bool {
		_, err := c.Crictl(t.Context(), "inspecti", ociimage.PauseRef)
		return err == nil
	}, "CRI does not list %s after the import", ociimage.PauseRef)
}

// cleanup removes every pod (so CNI DEL runs while the agent still
// serves), stops containerd and has the node reap what is left.
func (c *Containerd) cleanup() {
	t := c.T
	if !c.proc.Exited() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if out, err := c.Crictl(ctx, "rmp", "--all", "--force"); err != nil {
			t.Logf("cleanup: rmp: %v %s", err, out)
		}
		cancel()
		if !c.Stop() {
			t.Errorf("containerd did not exit on SIGTERM; killed it")
		}
	}
	c.proc.Kill()
	if c.opts.Reap != nil {
		c.opts.Reap()
	}
	if t.Failed() {
		t.Logf("containerd log:\n%s", c.Logs)
	}
}
