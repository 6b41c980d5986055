// Package health serves the kubelet's probes: /healthz (the process is
// alive and every liveness check passes: a failure there is one only a
// restart mends) and /readyz (every liveness and readiness check passes),
// and hosts /metrics on the same address.
package health

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Check reports one readiness condition and, when false, why.
type Check func() (bool, string)

// Checks is the one definition of readiness: the conjunction of its parts.
type Checks struct {
	mu   sync.Mutex
	all  []named // readiness: every check
	live []named // liveness: the ones only a restart mends
}

type named struct {
	name  string
	check Check
}

// Add registers a named readiness check.
func (c *Checks) Add(name string, check Check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, named{name, check})
}

// AddLiveness registers a named check that fails /healthz as well as
// readiness: the kubelet restarts an agent that fails it.
func (c *Checks) AddLiveness(name string, check Check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, named{name, check})
	c.live = append(c.live, named{name, check})
}

// Ready runs every check; the reason names each failing one.
func (c *Checks) Ready() (bool, string) {
	c.mu.Lock()
	all := c.all
	c.mu.Unlock()
	return run(all)
}

// Live runs the liveness checks.
func (c *Checks) Live() (bool, string) {
	c.mu.Lock()
	live := c.live
	c.mu.Unlock()
	return run(live)
}

func run(checks []named) (bool, string) {
	var failed []string
	for _, n := range checks {
		if ok, why := n.check(); !ok {
			failed = append(failed, n.name+": "+why)
		}
	}
	if len(failed) > 0 {
		return false, strings.Join(failed, "; ")
	}
	return true, ""
}

// Handler serves /healthz, /readyz and, when given, /metrics.
func Handler(c *Checks, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := c.Live(); !ok {
			http.Error(w, "not live: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := c.Ready(); !ok {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// Limits of the health server. It listens on the node's network (the agent
// is hostNetwork), so anyone who can reach the port can open connections:
// each is bounded in header size and in how long it may sit idle or slow.
var limits = struct {
	readHeader, read, write, idle time.Duration
	maxHeaderBytes                int
}{5 * time.Second, 10 * time.Second, 10 * time.Second, 30 * time.Second, 8 << 10}

// NewServer is the HTTP server for Handler, bounded by limits.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: limits.readHeader, ReadTimeout: limits.read,
		WriteTimeout: limits.write, IdleTimeout: limits.idle, MaxHeaderBytes: limits.maxHeaderBytes}
}
