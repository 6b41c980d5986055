package hostile

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// TestScrapesThroughAMetricsFlood: 2,000 clients from 64 loopback
// addresses (many pods) fetch /metrics as fast as it is answered, while a
// scraper from an address of its own (Prometheus, from another node)
// scrapes 20 times, 200 ms apart, with Prometheus's default 10 s timeout:
// every scrape must get 200 and the samples. When /metrics served 4
// scrapes at once and answered 503 to more, 7 of 20 failed; concurrent
// scrapes now share one exposition.
func TestScrapesThroughAMetricsFlood(t *testing.T) {
	n := newNode(t)
	n.start(true)
	pid := n.agent.Cmd.Process.Pid
	cpu0 := cpuTicks(t, pid)
	flood := n.NS.Command("setpriv", asNobody(filepath.Join(binDir, "flood"), "-addr", "127.0.0.1:9890", "-clients", "2000", "-sources", "64",
		"-paths", "/metrics", "-for", "8s")...)
	var out strings.Builder
	flood.Stdout, flood.Stderr = &out, &out
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- flood.Wait() }()
	waited := false
	defer func() {
		if !waited {
			flood.Process.Kill()
			<-done
		}
	}()
	// The flood is on once it holds most of the server's 64 connections.
	nstest.Eventually(t, 5*time.Second, func() bool { return healthConns(t, n) >= 32 }, "the flood holding the health port's connections")

	pace := time.NewTicker(200 * time.Millisecond)
	defer pace.Stop()
	ok := 0
	var connect, answer time.Duration // the slowest of each
	for range 20 {
		<-pace.C
		code, body, c, a := n.scrape()
		connect, answer = max(connect, c), max(answer, a)
		if code == 200 && strings.Contains(body, "sluice_ready 1\n") {
			ok++
		} else {
			t.Logf("scrape: %d %.80s", code, body)
		}
	}
	err := <-done
	waited = true
	if err != nil {
		t.Fatalf("flood: %v\n%s", err, out.String())
	}
	cpu := float64(cpuTicks(t, pid)-cpu0) / 100 // USER_HZ
	t.Logf("flood: %s; %d of 20 scrapes answered 200 (slowest connect %v, slowest answer once connected %v); agent CPU %.2f s, peak RSS %d KiB",
		strings.TrimSpace(out.String()), ok, connect.Round(time.Millisecond), answer.Round(time.Millisecond), cpu, vmKiB(t, pid, "VmHWM"))
	if ok < 20 {
		t.Errorf("%d of 20 scrapes through the flood answered 200 with the samples, want all", ok)
	}
}

// scrape fetches /metrics as a Prometheus on another node would: from an
// address of its own (127.0.0.3), a connection per scrape, within
// Prometheus's default scrape timeout of 10 s, and not as the kubelet's
// kind (its socket is uid 65534's: a root-owned local one would be served
// ahead of the queue). It says how long the connection took to be
// accepted and the answer to start once it was.
func (n *node) scrape() (code int, body string, connect, answer time.Duration) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := n.NS.Do(func() error {
				// This thread alone (Do discards it afterwards): the
				// socket takes the thread's fsuid when it is made.
				if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), 65534, ^uintptr(0)); e != 0 {
					return e
				}
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
				var err error
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	start := time.Now()
	var wrote time.Time
	trace := &httptrace.ClientTrace{
		WroteRequest:         func(httptrace.WroteRequestInfo) { wrote = time.Now() },
		GotFirstResponseByte: func() { answer = time.Since(wrote) },
	}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "http://127.0.0.1:9890/metrics", nil)
	resp, err := client.Do(req)
	if !wrote.IsZero() {
		connect = wrote.Sub(start)
	}
	if err != nil {
		return 0, err.Error(), connect, answer
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), connect, answer
}

// healthConns counts the established connections to the health port.
func healthConns(t *testing.T, n *node) int {
	count := 0
	n.NS.Do(func() error {
		socks, err := netlink.SocketDiagTCP(unix.AF_INET)
		for _, s := range socks {
			if s.ID.DestinationPort == 9890 && s.State == netlink.TCP_ESTABLISHED {
				count++
			}
		}
		return err
	})
	return count
}

// cpuTicks is the user and system time pid has used, in clock ticks.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's closing parenthesis: utime and stime are
	// the 12th and 13th of them.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return u + s
}
