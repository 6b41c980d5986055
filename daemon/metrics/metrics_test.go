package metrics

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// A labelled series exists at 0 before its first event, so an alert on
// it sees a value, not nothing; a counter is typed counter.
func TestByLabelExportsEveryValue(t *testing.T) {
	m := New()
	got := map[string]int{}
	m.ByLabel("counter", "things_total", "Things.", "outcome", []string{"a", "b"}, func() map[string]int { return got })
	m.ByLabel("gauge", "level", "Level.", "mode", []string{"x"}, func() map[string]int { return map[string]int{"y": 2} })
	out := scrape(t, m)
	for _, want := range []string{
		"# TYPE sluice_things_total counter", `sluice_things_total{outcome="a"} 0`, `sluice_things_total{outcome="b"} 0`,
		"# TYPE sluice_level gauge", `sluice_level{mode="x"} 0`, `sluice_level{mode="y"} 2`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("scrape lacks %q:\n%s", want, out)
		}
	}
	got["b"] = 3
	if out := scrape(t, m); !strings.Contains(out, `sluice_things_total{outcome="b"} 3`) {
		t.Errorf("scrape after b=3:\n%s", out)
	}
}

func TestBool(t *testing.T) {
	m := New()
	v := false
	m.Bool("ready", "Ready.", func() bool { return v })
	if out := scrape(t, m); !strings.Contains(out, "sluice_ready 0\n") {
		t.Errorf("ready false:\n%s", out)
	}
	v = true
	if out := scrape(t, m); !strings.Contains(out, "sluice_ready 1\n") {
		t.Errorf("ready true:\n%s", out)
	}
}

// Scrapes that arrive while a render is under way wait for it and are
// answered with it: 16 at once are all answered 200 (4 were served and the
// rest answered 503 at once, so a real scraper lost scrapes to a flood).
func TestConcurrentScrapesAreAllServed(t *testing.T) {
	m := New()
	var renders atomic.Int32
	entered, release := make(chan struct{}, 1), make(chan struct{})
	m.Func("gauge", "slow", "Blocks until released.", func() float64 {
		if renders.Add(1) == 1 {
			entered <- struct{}{}
			<-release
		}
		return 1
	})
	h := m.Handler()
	const scrapes = 16
	type answer struct {
		code int
		body string
	}
	done := make(chan answer, scrapes)
	scrapeAsync := func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		done <- answer{rec.Code, rec.Body.String()}
	}
	go scrapeAsync()
	<-entered // the first scrape's render is under way
	for range scrapes - 1 {
		go scrapeAsync()
	}
	// No scrape is answered while the render is held: none is refused.
	select {
	case a := <-done:
		t.Fatalf("a scrape was answered while the render was held: %d %q", a.code, a.body)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	for range scrapes {
		if a := <-done; a.code != 200 || !strings.Contains(a.body, "sluice_slow 1\n") {
			t.Fatalf("a scrape answered %d:\n%.200s", a.code, a.body)
		}
	}
}

// join hands every scrape the render in flight, and starts a new one once
// it is done: concurrent scrapes cost one Gather between them.
func TestJoinSharesTheRenderInFlight(t *testing.T) {
	reg := prometheus.NewRegistry()
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "slow", Help: "Blocks the first time."}, func() float64 {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
		return 0
	}))
	e := &exposition{g: reg, wait: time.Minute}
	first := e.join()
	<-entered
	for range 8 {
		if e.join() != first {
			t.Fatal("a scrape during a render started another")
		}
	}
	close(release)
	<-first.done
	if first.err != nil || !strings.Contains(string(first.body), "slow 0\n") {
		t.Fatalf("render: %v %q", first.err, first.body)
	}
	next := e.join()
	<-next.done
	if next == first || calls.Load() != 2 {
		t.Errorf("a scrape after the render ended reused it (%d renders)", calls.Load())
	}
}

// A scrape after a render finished starts its own: values are never
// served from an earlier scrape's render.
func TestScrapesInARowSeeFreshValues(t *testing.T) {
	m := New()
	var v atomic.Int64
	m.Func("gauge", "now", "Changes between scrapes.", func() float64 { return float64(v.Load()) })
	for i := range int64(3) {
		v.Store(i)
		if out := scrape(t, m); !strings.Contains(out, fmt.Sprintf("sluice_now %d\n", i)) {
			t.Fatalf("scrape %d:\n%s", i, out)
		}
	}
}

// A render that hangs (a value read at scrape time that blocks) answers
// 503 within the wait, and holds one goroutine however many scrapes ask.
func TestHungRenderAnswers503(t *testing.T) {
	reg := prometheus.NewRegistry()
	release := make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hangs", Help: "Never returns."}, func() float64 {
		calls.Add(1)
		<-release
		return 0
	}))
	e := &exposition{g: reg, wait: 50 * time.Millisecond}
	for range 3 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 503 {
			t.Errorf("scrape of a hung render answered %d, want 503", rec.Code)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d renders started for one that hangs", n)
	}
}

// Prometheus asks for gzip; the answer is the same text, compressed.
func TestScrapeGzip(t *testing.T) {
	m := New()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	m.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 || rec.Header().Get("Content-Encoding") != "gzip" || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil || !strings.Contains(string(b), "sluice_build_info{") {
		t.Fatalf("gunzipped: %v\n%.300s", err, b)
	}
	for _, enc := range []string{"", "identity", "gzip;q=0", "br"} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept-Encoding", enc)
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, req)
		if rec.Header().Get("Content-Encoding") != "" || !strings.Contains(rec.Body.String(), "sluice_build_info{") {
			t.Errorf("Accept-Encoding %q: %v %.80q", enc, rec.Header(), rec.Body.String())
		}
	}
}
