// Command readytime measures how long a restarted sluice-agent takes until
// it takes pods again: from exec to CNI STATUS saying ready (the plugin
// entry and binary in place, the socket serving). That time bounds how long
// new pods on a node wait, failing closed, while its agent restarts.
//
// It runs the real agent standalone on temp dirs only (its own CNI dirs,
// socket, state; health on a loopback port the kernel picks), so it touches
// nothing of the machine's. Kubernetes mode adds the informers' first list
// and the kubelet's readiness probe period on top (docs/operations.md).
//
//	make build && go run ./hack/readytime --bin bin --runs 20
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding sluice-agent and sluice")
	runs := flag.Int("runs", 20, "restarts to time")
	flag.Parse()
	if err := run(*bin, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "readytime:", err)
		os.Exit(1)
	}
}

func run(bin string, runs int) error {
	agent, err := filepath.Abs(filepath.Join(bin, "sluice-agent"))
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sluice-readytime-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"cni-bin", "net.d"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	primary := `{"cniVersion":"1.0.0","name":"test","plugins":[{"type":"loopback"}]}`
	if err := os.WriteFile(filepath.Join(dir, "net.d", "10-test.conflist"), []byte(primary), 0o644); err != nil {
		return err
	}
	socket := filepath.Join(dir, "agent.sock")
	args := []string{"--socket", socket, "--state-dir", filepath.Join(dir, "state"),
		"--cni-bin-dir", filepath.Join(dir, "cni-bin"), "--cni-conf-dir", filepath.Join(dir, "net.d"),
		"--health-addr", "127.0.0.1:0", "--uninstall-on-exit", "false", "--log-level", "warn",
		"--plugin-binary", filepath.Join(filepath.Dir(agent), "sluice")}

	var ready, stop []time.Duration
	var prev *exec.Cmd
	for i := 0; i <= runs; i++ {
		if prev != nil {
			t := time.Now()
			if err := prev.Process.Signal(syscall.SIGTERM); err != nil {
				return err
			}
			prev.Wait()
			stop = append(stop, time.Since(t))
		}
		cmd := exec.Command(agent, args...)
		cmd.Stderr = os.Stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s: %w", agent, err)
		}
		if err := waitReady(socket, 30*time.Second); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return err
		}
		if i > 0 { // the first start installs from scratch; the rest are restarts
			ready = append(ready, time.Since(start))
		}
		prev = cmd
	}
	prev.Process.Signal(syscall.SIGTERM)
	prev.Wait()
	fmt.Printf("restart → ready (exec to CNI STATUS ready), %d restarts: %s\n", runs, summary(ready))
	fmt.Printf("SIGTERM → exit (idle agent, drain included):      %s\n", summary(stop))
	return nil
}

// waitReady polls CNI STATUS over the socket, as the runtime would.
func waitReady(socket string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if ok, _ := statusReady(socket); ok {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	_, why := statusReady(socket)
	return fmt.Errorf("agent not ready after %s: %s", timeout, why)
}

func statusReady(socket string) (bool, string) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false, err.Error()
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	resp, err := sluicev1.NewCNIClient(conn).Status(ctx, &sluicev1.StatusRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2})
	if err != nil {
		return false, err.Error()
	}
	return resp.Ready, resp.Reason
}

func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[int(p*float64(len(s)-1))].Round(100 * time.Microsecond) }
	return fmt.Sprintf("median %s, p90 %s, max %s", q(0.5), q(0.9), s[len(s)-1].Round(100*time.Microsecond))
}
