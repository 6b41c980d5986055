package health

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sluicemesh/sluice/internal/connlimit"
)

// Handler serves /healthz, /readyz and, when given, /metrics. The probes
// read the last verdict of c; they run no check.
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
// at most serving are served at once, and up to waiting more wait their
// turn in arrival order (more are closed at once); at most perPeer are open
// from one peer (more are closed at once, so one pod cannot take every
// slot); each is bounded in header size and in how long it may be slow. A
// probe or a scrape needs one short request. A peer is a remote address,
// and for a process on the node itself the address and its socket's owner
// (connlimit.ByIPAndLocalOwner): the kubelet probes from the node's own
// address, as any local user and any hostNetwork pod can, so the kubelet's
// root-owned probes have a bucket no unprivileged local process can fill,
// and are served at once on first slots of their own instead of waiting
// behind a flood.
var limits = struct {
	readHeader, read, write, idle time.Duration
	maxHeaderBytes                int
	bounds                        connlimit.Bounds
}{2 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 8 << 10,
	connlimit.Bounds{Serving: 64, First: 16, Waiting: 1024, PerPeer: 8}}

// NewServer is the HTTP server for Handler, bounded by limits. It serves
// one request a connection: an idle keep-alive connection would hold one of
// the maxConns slots for nothing, and a client that leaves many open (a
// leaky scraper, an attacker) would hold off the kubelet's probes. The
// kubelet does not keep probe connections alive anyway.
func NewServer(h http.Handler) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: limits.readHeader, ReadTimeout: limits.read,
		WriteTimeout: limits.write, IdleTimeout: limits.idle, MaxHeaderBytes: limits.maxHeaderBytes}
	srv.SetKeepAlivesEnabled(false)
	return srv
}

// Listen opens the health port, bounded by limits.bounds.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health listener %s: %w", addr, err)
	}
	return connlimit.Fair(l, limits.bounds, connlimit.ByIPAndLocalOwner), nil
}
