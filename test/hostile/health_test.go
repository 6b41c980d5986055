package hostile

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// floodRSSBoundKiB is what the agent may reach (VmHWM) while 2,000 clients
// fetch /metrics and /readyz at once.
const floodRSSBoundKiB = 64 << 10

// floodHealthPort has 2,000 clients from 64 loopback addresses (many pods)
// fetch /metrics, /readyz and /healthz as fast as they are answered and 200
// more from one address hold connections open with half a request
// (slowloris), for 4 s, while fresh pods' ADDs
// and STATUS calls go through the agent: each must succeed within the
// plugin's deadline, the kubelet's probes (from another address) within
// their 1 s timeout, and the agent's peak RSS stay under the bound. The
// flood runs as uid 65534, as a pod's or a local user's would; the
// kubelet's probes are root's. Before
// readiness was computed on the agent's own schedule, every request dialled
// the agent's socket and ADDs failed with "try again later"; before one
// peer was held to a few connections, the held ones took every slot and
// the probes timed out; while the probes waited in the kernel's backlog
// behind the flood's connections, the slowest took up to 0.7 s of its 1 s
// on an idle machine and CI, busier, missed one.
func floodHealthPort(t *testing.T, n *node) {
	flood := n.NS.Command("setpriv", asNobody(filepath.Join(binDir, "flood"), "-addr", "127.0.0.1:9890", "-clients", "2000", "-sources", "64", "-hold", "200",
		"-paths", "/metrics,/readyz,/healthz", "-for", "4s")...)
	var out strings.Builder
	flood.Stdout, flood.Stderr = &out, &out
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- flood.Wait() }()
	calls := 0
	var slowest time.Duration
	for flooding := true; flooding; calls++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("flood: %v\n%s", err, out.String())
			}
			flooding = false
		default:
		}
		pod := nstest.NewIn(t, n.Root, fmt.Sprintf("flooded-%d", calls))
		if e, took := n.run(call{verb: "ADD", id: pod.Name, netns: pod.Path}); e != nil {
			t.Errorf("ADD during the flood: %v (after %v)", e, took)
		}
		if e, took := n.run(call{verb: "STATUS", conf: map[string]any{"cniVersion": "1.1.0", "status": "agent"}}); e != nil {
			t.Errorf("STATUS during the flood: %v (after %v)", e, took)
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			start := time.Now()
			if code, body := n.probe(path); code != 200 {
				t.Errorf("the kubelet's probe of %s during the flood: %d %s", path, code, body)
			}
			slowest = max(slowest, time.Since(start))
		}
	}
	peak := vmKiB(t, n.agent.Cmd.Process.Pid, "VmHWM")
	t.Logf("flood: %s; %d ADD and STATUS pairs; slowest probe %v; agent peak RSS %d KiB (bound %d KiB)",
		strings.TrimSpace(out.String()), calls, slowest.Round(time.Millisecond), peak, floodRSSBoundKiB)
	if !strings.Contains(out.String(), "answered=") || strings.Contains(out.String(), "answered=0 ") {
		t.Fatalf("the flood got no answer at all: %s", out.String())
	}
	if peak > floodRSSBoundKiB {
		t.Errorf("agent peak RSS %d KiB over the bound %d KiB", peak, floodRSSBoundKiB)
	}
}

// silenceProbesAsNobody has uid 65534 on the node hold 48 connections with
// half a request from the kubelet's own address (127.0.0.2, as a local user
// or a hostNetwork pod can), reopening each as the agent cuts it, while the
// kubelet probes /healthz 20 times from that address: at least 18 must
// answer 200 within the probe's 1 s. Keyed by address alone, the held
// connections filled the address's bucket and 0 of 20 answered (readiness
// failed, liveness restarted the agent); the bucket is now the address and
// the local socket's owner.
func silenceProbesAsNobody(t *testing.T, n *node) {
	flood := n.NS.Command("setpriv", asNobody(filepath.Join(binDir, "flood"), "-addr", "127.0.0.1:9890", "-clients", "0", "-hold", "48",
		"-hold-from", "127.0.0.2", "-for", "60s")...)
	var out strings.Builder
	flood.Stdout, flood.Stderr = &out, &out
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { flood.Process.Kill(); flood.Wait() }()
	held := func() int {
		count := 0
		n.NS.Do(func() error {
			socks, err := netlink.SocketDiagTCP(unix.AF_INET)
			for _, s := range socks {
				if s.UID == 65534 && s.ID.DestinationPort == 9890 && s.State == netlink.TCP_ESTABLISHED {
					count++
				}
			}
			return err
		})
		return count
	}
	nstest.Eventually(t, 10*time.Second, func() bool { return held() >= 8 }, "uid 65534 holding the address's 8 connections")
	// Paced as the kubelet's period would be, compressed: the 20 probes
	// span 4 s, past the 2 s in which the agent cuts a half-sent request,
	// so they meet the held connections being cut and reopened too.
	pace := time.NewTicker(200 * time.Millisecond)
	defer pace.Stop()
	answered := 0
	for range 20 {
		<-pace.C
		if code, body := n.probe("/healthz"); code == 200 {
			answered++
		} else {
			t.Logf("probe: %d %s (uid 65534 holds %d)", code, body, held())
		}
	}
	t.Logf("%d of 20 probes answered with uid 65534 holding connections from their address", answered)
	if answered < 18 {
		t.Fatalf("%d of 20 probes of /healthz answered 200 within 1 s, want at least 18", answered)
	}
}

// probe fetches a path of the health address as the kubelet does: from the
// node's own address (here 127.0.0.2, not the flood's), a connection per
// probe, within the probe's default 1 s timeout.
func (n *node) probe(path string) (int, string) {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := n.NS.Do(func() error {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
				var err error
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	resp, err := client.Get("http://127.0.0.1:9890" + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// asNobody is setpriv's arguments that run args as uid and gid 65534: a
// pod's or a local user's process, not the kubelet's kind.
func asNobody(args ...string) []string {
	return append([]string{"--reuid", "65534", "--regid", "65534", "--clear-groups"}, args...)
}
