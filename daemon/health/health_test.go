package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/connlimit"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// running runs c's checker every period until the test ends.
func running(t *testing.T, c *Checks, period time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, period); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// answers waits until path answers code.
func answers(t *testing.T, url string, code int) {
	t.Helper()
	nstest.Eventually(t, 5*time.Second, func() bool { got, _ := get(t, url); return got == code }, "%s never answered %d", url, code)
}

func TestReadyz(t *testing.T) {
	c := &Checks{}
	var installed atomic.Bool
	c.Add("grpc", func() (bool, string) { return true, "" })
	c.Add("installer", func() (bool, string) { return installed.Load(), "conflist entry missing" })
	srv := httptest.NewServer(Handler(c, nil))
	defer srv.Close()
	if code, body := get(t, srv.URL+"/readyz"); code != 503 || !strings.Contains(body, "not checked yet") {
		t.Errorf("/readyz before the first check = %d %q", code, body)
	}
	running(t, c, 20*time.Millisecond)
	answers(t, srv.URL+"/healthz", 200)
	if code, body := get(t, srv.URL+"/readyz"); code != 503 || !strings.Contains(body, "installer: conflist entry missing") {
		t.Errorf("/readyz = %d %q, want 503 naming the installer", code, body)
	}
	installed.Store(true)
	answers(t, srv.URL+"/readyz", 200)
}

// A liveness failure fails /healthz, and readiness with it.
func TestHealthzFailsOnLiveness(t *testing.T) {
	c := &Checks{}
	var gone atomic.Bool
	c.AddLiveness("socket", func() (bool, string) { return !gone.Load(), "socket file removed" })
	srv := httptest.NewServer(Handler(c, nil))
	defer srv.Close()
	running(t, c, 20*time.Millisecond)
	answers(t, srv.URL+"/healthz", 200)
	answers(t, srv.URL+"/readyz", 200)
	gone.Store(true)
	answers(t, srv.URL+"/healthz", 503)
	if code, body := get(t, srv.URL+"/readyz"); code != 503 || !strings.Contains(body, "socket: socket file removed") {
		t.Errorf("/readyz = %d %q with the socket gone", code, body)
	}
}

// A flood of probes runs no check: the checks run on the checker's
// schedule alone. Before, every request ran every check (the gRPC one
// dialled the agent's own socket), so a flood on /readyz or /metrics held
// the socket's connection slots and failed ADDs.
func TestFloodRunsNoCheck(t *testing.T) {
	c := &Checks{}
	var calls atomic.Int64
	c.AddLiveness("socket", func() (bool, string) { calls.Add(1); return true, "" })
	c.Add("grpc", func() (bool, string) { calls.Add(1); return true, "" })
	srv := httptest.NewServer(Handler(c, nil))
	defer srv.Close()
	running(t, c, time.Hour)
	answers(t, srv.URL+"/readyz", 200)
	before := calls.Load()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			for j := range 25 {
				if code, _ := get(t, srv.URL+[]string{"/readyz", "/healthz"}[(i+j)%2]); code != 200 {
					t.Errorf("probe answered %d", code)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := calls.Load() - before; got != 0 {
		t.Fatalf("500 probes ran the checks %d times; want 0 (the next run is an hour away)", got)
	}
}

// Each check runs once a run, also when it is a liveness check (listed in
// both).
func TestEachCheckRunsOnceARun(t *testing.T) {
	c := &Checks{}
	var calls atomic.Int64
	c.AddLiveness("socket", func() (bool, string) { calls.Add(1); return false, "gone" })
	v := c.check(time.Minute)
	if calls.Load() != 1 || v.ready.ok || v.live.ok || v.live.why != "socket: gone" || v.ready.why != "socket: gone" {
		t.Fatalf("one run: %d calls, verdict %+v", calls.Load(), v)
	}
}

// Published wakes its waiters with each verdict Run publishes, and only
// then; Failing names the failing checks in the order they were added.
func TestPublishedWakesOnEachVerdict(t *testing.T) {
	c := &Checks{}
	var installed atomic.Bool
	c.Add("policy", func() (bool, string) { return false, "not synced" })
	c.Add("installer", func() (bool, string) { return installed.Load(), "entry missing" })
	if names, why := c.Failing(); names != nil || why != "not checked yet" {
		t.Fatalf("Failing() before a run = %v %q", names, why)
	}
	woken := c.Published()
	select {
	case <-woken:
		t.Fatal("Published woke before any verdict")
	default:
	}
	running(t, c, time.Hour) // one run now, the next an hour away
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("Published did not wake on the first verdict")
	}
	if names, why := c.Failing(); !slices.Equal(names, []string{"policy", "installer"}) || why != "policy: not synced; installer: entry missing" {
		t.Fatalf("Failing() = %v %q", names, why)
	}
	select {
	case <-c.Published():
		t.Fatal("Published woke with no new verdict")
	case <-time.After(50 * time.Millisecond):
	}
}

// A checker that stops finishing (a check hangs) does not leave the last
// answer green: after 10 periods the agent is neither ready nor live.
func TestHungCheckerFailsReadinessAndLiveness(t *testing.T) {
	c := &Checks{}
	var hang atomic.Bool
	release := make(chan struct{})
	defer close(release)
	c.AddLiveness("socket", func() (bool, string) {
		if hang.Load() {
			<-release
		}
		return true, ""
	})
	running(t, c, 10*time.Millisecond)
	nstest.Eventually(t, 5*time.Second, func() bool { ok, _ := c.Live(); return ok }, "never live")
	hang.Store(true)
	nstest.Eventually(t, 5*time.Second, func() bool { ok, _ := c.Live(); return !ok }, "live with the checker hung")
	if ok, why := c.Ready(); ok || !strings.Contains(why, "hangs") {
		t.Fatalf("Ready() = %v %q with the checker hung", ok, why)
	}
}

// Past the connection bound, a connection waits for a slot: the health
// port's connections are bounded. (The test runs as root, so its
// connections are the kubelet's kind: no First slot here, to see the bound.)
func TestHealthPortIsBounded(t *testing.T) {
	saved := limits
	defer func() { limits = saved }()
	limits.bounds = connlimit.Bounds{Serving: 2, Waiting: 8, PerPeer: 8}
	c := &Checks{}
	c.Add("x", func() (bool, string) { return true, "" })
	c.last.Store(c.check(time.Hour))
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Handler(c, nil))
	go srv.Serve(l)
	defer srv.Close()
	url := fmt.Sprintf("http://%s/healthz", l.Addr())
	var holders []net.Conn
	for range 2 {
		h, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		holders = append(holders, h)
	}
	client := &http.Client{Timeout: 300 * time.Millisecond}
	if resp, err := client.Get(url); err == nil {
		resp.Body.Close()
		t.Fatal("a third connection was served while two held the slots")
	}
	holders[0].Close()
	answers(t, url, 200)
}

// A connection that sends nothing, or goes idle after a request, is closed
// by the server: the port is on the node's network.
func TestServerClosesIdleAndSlowConnections(t *testing.T) {
	saved := limits
	defer func() { limits = saved }()
	limits.readHeader, limits.idle = 200*time.Millisecond, 200*time.Millisecond
	srv := NewServer(Handler(&Checks{}, nil))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	closedWithin := func(c net.Conn, d time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(d))
		for {
			if _, err := c.Read(make([]byte, 4096)); err != nil {
				return !errors.Is(err, os.ErrDeadlineExceeded)
			}
		}
	}
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if !closedWithin(silent, 3*time.Second) {
		t.Error("a connection that sent nothing stayed open")
	}
	idle, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if !closedWithin(idle, 3*time.Second) {
		t.Error("an idle keep-alive connection stayed open")
	}
	big, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	io.WriteString(big, "GET /healthz HTTP/1.1\r\nHost: x\r\nX: "+strings.Repeat("a", 64<<10)+"\r\n\r\n")
	b, _ := io.ReadAll(io.LimitReader(big, 64))
	if !strings.Contains(string(b), "431") {
		t.Errorf("a 64 KiB header got %q, want 431", b)
	}
}

// Clients that leave their connections open after a request (a leaky
// scraper, or anyone on the network) hold no slot: each connection serves
// one request, so the kubelet's probe is answered within its 1 s timeout.
// With keep-alive, 64 such clients held every slot for the idle timeout.
func TestLeakyClientsDoNotHoldThePort(t *testing.T) {
	c := &Checks{}
	c.last.Store(c.check(time.Hour))
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Handler(c, nil))
	go srv.Serve(l)
	defer srv.Close()
	url := fmt.Sprintf("http://%s/healthz", l.Addr())
	for range 2 * limits.bounds.Serving {
		leaky := &http.Client{Transport: &http.Transport{}} // never closes its idle connection
		resp, err := leaky.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := probe.Get(url)
	if err != nil {
		t.Fatalf("probe after %d leaky clients: %v", 2*limits.bounds.Serving, err)
	}
	resp.Body.Close()
}
