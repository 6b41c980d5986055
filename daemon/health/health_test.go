package health

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestReadyz(t *testing.T) {
	c := &Checks{}
	var installed atomic.Bool
	c.Add("grpc", func() (bool, string) { return true, "" })
	c.Add("installer", func() (bool, string) { return installed.Load(), "conflist entry missing" })
	srv := httptest.NewServer(Handler(c, nil))
	defer srv.Close()

	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "installer: conflist entry missing") {
		t.Errorf("/readyz = %d %q, want 503 naming the installer", code, body)
	}
	installed.Store(true)
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz = %d once every check passes", code)
	}
}

// A liveness failure fails /healthz, and readiness with it.
func TestHealthzFailsOnLiveness(t *testing.T) {
	c := &Checks{}
	var gone atomic.Bool
	c.AddLiveness("socket", func() (bool, string) { return !gone.Load(), "socket file removed" })
	srv := httptest.NewServer(Handler(c, nil))
	defer srv.Close()
	code := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code("/healthz") != 200 || code("/readyz") != 200 {
		t.Fatal("not healthy with the socket ours")
	}
	gone.Store(true)
	if code("/healthz") != 503 || code("/readyz") != 503 {
		t.Fatal("healthy with the socket gone")
	}
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
