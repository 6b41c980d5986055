package health

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
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
