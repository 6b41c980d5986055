// Package health serves the kubelet's probes: /healthz (the process is
// alive and every liveness check passes: a failure there is one only a
// restart mends) and /readyz (every liveness and readiness check passes),
// and hosts /metrics on the same address.
//
// Health is cheap and cannot be used against the node: the checks run on
// the agent's own schedule (Checks.Run), never per request, and every
// request, probe, scrape or CNI STATUS, reads the last verdict.
//
// The checks run every second while ready and from 50 ms doubling while
// not; a verdict older than 10 periods fails readiness and liveness. The
// port serves one request per connection (no keep-alive: idle
// connections held slots against the kubelet's probes), 64 connections
// at once and 8 from one address, past which a connection is closed at
// once rather than queued (internal/connlimit); headers within 2 s, the
// request and answer within 5 s; /metrics 4 at once, then 503. /healthz
// also fails when a socket path no longer names our listener (its dev and
// inode are stamped at listen).
package health

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Check reports one readiness condition and, when false, why.
type Check func() (bool, string)

// Checks is the one definition of readiness: the conjunction of its parts.
type Checks struct {
	mu   sync.Mutex
	all  []named // readiness: every check
	live []named // liveness: the ones only a restart mends

	last atomic.Pointer[verdict] // nil until Run has checked once
	// next is closed when the next verdict is published (Published).
	next chan struct{}
}

type named struct {
	name  string
	check Check
}

// verdict is one run of every check.
type verdict struct {
	at    time.Time
	stale time.Duration // the verdict stands this long
	ready result        // every check
	live  result        // the liveness checks
}

type result struct {
	ok     bool
	why    string
	failed []string // the names of the failing checks, in order
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

// Ready is the last verdict of every check; the reason names each failing
// one. It runs no check.
func (c *Checks) Ready() (bool, string) {
	v, why := c.current()
	if v == nil {
		return false, why
	}
	return v.ready.ok, v.ready.why
}

// Failing names the checks that failed in the last verdict, in the order
// they were added, and says why; none while ready. Without a standing
// verdict (none yet, or the checker hangs) it names none and why says so:
// the caller must read that as not ready.
func (c *Checks) Failing() (names []string, why string) {
	v, why := c.current()
	if v == nil {
		return nil, why
	}
	return v.ready.failed, v.ready.why
}

// Published returns a channel closed when Run next publishes a verdict
// (at least every period while ready): a reader that must follow the
// verdict closely, the node condition, waits on it instead of polling.
func (c *Checks) Published() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next == nil {
		c.next = make(chan struct{})
	}
	return c.next
}

// publish stores v as the last verdict and wakes Published's waiters.
func (c *Checks) publish(v *verdict) {
	c.last.Store(v)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next != nil {
		close(c.next)
		c.next = nil
	}
}

// Live is the last verdict of the liveness checks. It runs no check.
func (c *Checks) Live() (bool, string) {
	v, why := c.current()
	if v == nil {
		return false, why
	}
	return v.live.ok, v.live.why
}

// current is the last verdict while it stands, else nil and why: none yet,
// or the checker has not finished a run for many periods (a check hangs).
func (c *Checks) current() (*verdict, string) {
	v := c.last.Load()
	if v == nil {
		return nil, "not checked yet"
	}
	if age := time.Since(v.at); age > v.stale {
		return nil, fmt.Sprintf("checks last completed %v ago (a check hangs?)", age.Round(time.Second))
	}
	return v, ""
}

// Run checks now and then every period until ctx ends, and publishes each
// verdict. While not ready it checks sooner, from period/20 doubling up to
// period, so a starting agent is found ready within milliseconds. A verdict
// stands for 10 periods: a checker that stops finishing fails readiness and
// liveness rather than leaving an old answer green for ever.
func (c *Checks) Run(ctx context.Context, period time.Duration) {
	backoff := period / 20
	for {
		v := c.check(10 * period)
		c.publish(v)
		wait := period
		if v.ready.ok {
			backoff = period / 20
		} else {
			wait, backoff = backoff, min(backoff*2, period)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// check runs every check once (liveness checks are in all too).
func (c *Checks) check(stale time.Duration) *verdict {
	c.mu.Lock()
	all, live := c.all, c.live
	c.mu.Unlock()
	seen := map[string]string{}
	return &verdict{at: time.Now(), stale: stale, ready: run(all, seen), live: run(live, seen)}
}

// run runs each check not in seen yet (recording its reason, "" when it
// passes) and reports every failing one.
func run(checks []named, seen map[string]string) result {
	var failed, names []string
	for _, n := range checks {
		why, done := seen[n.name]
		if !done {
			ok, w := n.check()
			switch {
			case ok:
				w = ""
			case w == "":
				w = "failed"
			}
			why, seen[n.name] = w, w
		}
		if why != "" {
			failed = append(failed, n.name+": "+why)
			names = append(names, n.name)
		}
	}
	return result{ok: len(failed) == 0, why: strings.Join(failed, "; "), failed: names}
}
