// Package health serves the kubelet's probes: /healthz (the process is
// alive and serving HTTP) and /readyz (every readiness check passes), and
// hosts /metrics on the same address.
package health

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// Check reports one readiness condition and, when false, why.
type Check func() (bool, string)

// Checks is the one definition of readiness: the conjunction of its parts.
type Checks struct {
	mu     sync.Mutex
	names  []string
	checks []Check
}

// Add registers a named check.
func (c *Checks) Add(name string, check Check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, name)
	c.checks = append(c.checks, check)
}

// Ready runs every check; the reason names each failing one.
func (c *Checks) Ready() (bool, string) {
	c.mu.Lock()
	names, checks := c.names, c.checks
	c.mu.Unlock()
	var failed []string
	for i, check := range checks {
		if ok, why := check(); !ok {
			failed = append(failed, names[i]+": "+why)
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
