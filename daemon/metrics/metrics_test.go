package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
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

// At most maxScrapesInFlight scrapes are served at once; one more is
// answered 503 at once instead of adding to what the agent holds.
func TestScrapesInFlightAreBounded(t *testing.T) {
	m := New()
	entered, release := make(chan struct{}), make(chan struct{})
	m.Func("gauge", "slow", "Blocks until released.", func() float64 {
		entered <- struct{}{}
		<-release
		return 1
	})
	h := m.Handler()
	done := make(chan int, maxScrapesInFlight)
	for range maxScrapesInFlight {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			done <- rec.Code
		}()
		<-entered
	}
	past := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		past <- rec.Code
	}()
	select {
	case code := <-past:
		if code != 503 {
			t.Errorf("scrape past the bound answered %d, want 503", code)
		}
	case <-entered:
		t.Error("a scrape past the bound was served")
	}
	close(release)
	for range maxScrapesInFlight {
		if code := <-done; code != 200 {
			t.Errorf("a scrape within the bound answered %d", code)
		}
	}
}
