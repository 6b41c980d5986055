package metrics

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// maxScrapeWait bounds how long a scrape waits for the render it joined:
// under the health server's 5 s write timeout, so a render that hangs (a
// value read at scrape time that blocks) answers 503 rather than nothing.
const maxScrapeWait = 4 * time.Second

// exposition serves /metrics from one render shared by every scrape that
// asks while it is under way. The port is reachable from the network: a
// flood of scrapes used to be met with at most 4 renders at once and 503
// for the rest, so a real scraper lost scrapes to it; now a scrape joins
// the render in flight (its values at most one render older than the
// request) or starts one, and a flood costs one render at a time, each
// written to every scrape that joined it. A scrape with none in flight
// starts its own, so two in a row never see the same values.
type exposition struct {
	g    prometheus.Gatherer
	wait time.Duration // maxScrapeWait
	mu   sync.Mutex
	cur  *render // the latest render, in flight until done is closed
}

// render is one Gather, encoded once in the text format and gzipped at
// most once, for the scrapes that joined it.
type render struct {
	done   chan struct{}
	body   []byte
	err    error
	gzOnce sync.Once
	gz     []byte
}

// contentType is the Prometheus text format, the one every scraper reads.
var contentType = string(expfmt.NewFormat(expfmt.TypeTextPlain))

func (e *exposition) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rd := e.join()
	wait := time.NewTimer(e.wait)
	defer wait.Stop()
	select {
	case <-rd.done:
	case <-r.Context().Done():
		return
	case <-wait.C:
		http.Error(w, "busy rendering metrics: scrape again", http.StatusServiceUnavailable)
		return
	}
	if rd.err != nil {
		http.Error(w, "gather metrics: "+rd.err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	body := rd.body
	if acceptsGzip(r) {
		rd.gzOnce.Do(rd.compress)
		w.Header().Set("Content-Encoding", "gzip")
		body = rd.gz
	}
	w.Write(body)
}

// join returns the render in flight, or starts one. The render runs on its
// own goroutine, so a scrape that gives up does not leave it half done and
// a hung one holds a single goroutine, whatever the number of scrapes.
func (e *exposition) join() *render {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur != nil {
		select {
		case <-e.cur.done:
		default:
			return e.cur
		}
	}
	rd := &render{done: make(chan struct{})}
	e.cur = rd
	go e.render(rd)
	return rd
}

func (e *exposition) render(rd *render) {
	defer close(rd.done)
	mfs, err := e.g.Gather()
	if err != nil {
		rd.err = err
		return
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			rd.err = err
			return
		}
	}
	rd.body = b.Bytes()
}

func (rd *render) compress() {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed) // a valid level: no error
	zw.Write(rd.body)
	zw.Close()
	rd.gz = b.Bytes()
}

// acceptsGzip says whether the scraper takes gzip (Prometheus does).
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(coding), "gzip") && strings.ReplaceAll(strings.TrimSpace(params), " ", "") != "q=0" {
			return true
		}
	}
	return false
}
