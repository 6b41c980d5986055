package nodetest

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// RewritePrimary writes the node's primary conflist afresh, as Cilium's
// and Calico's agents write theirs at boot: the primary CNI's own bytes,
// with no other plugin's entry in them (a mesh CNI that inserted itself
// there is dropped), published by temp file and rename.
func (c *Cluster) RewritePrimary() error {
	data := fmt.Sprintf(primaryConflist, c.cniVersion, c.podCIDR)
	tmp := c.ConfDir("." + PrimaryConflist + ".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return fmt.Errorf("rewrite the primary conflist: %w", err)
	}
	if err := os.Rename(tmp, c.ConfDir(PrimaryConflist)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rewrite the primary conflist: %w", err)
	}
	return nil
}

// RacingPrimary is a stand-in primary CNI that rewrites its conflist again
// and again while a node boots: at every offset around the mesh agent's
// start rather than at one, so a window in which the runtime reads a chain
// without the mesh CNI cannot be missed by chance.
type RacingPrimary struct {
	rewrites atomic.Int64
	last     atomic.Int64 // unix nanoseconds of the last rewrite
	errs     atomic.Pointer[error]
	stop     context.CancelFunc
	done     chan struct{}
}

// RacePrimary starts rewriting c's primary conflist every period until
// Stop.
func (c *Cluster) RacePrimary(period time.Duration) *RacingPrimary {
	ctx, stop := context.WithCancel(context.Background())
	r := &RacingPrimary{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			if err := c.RewritePrimary(); err != nil {
				r.errs.Store(&err)
			} else {
				r.rewrites.Add(1)
				r.last.Store(time.Now().UnixNano())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return r
}

// Stop ends the rewrites and returns how many there were and the last
// error, if any. It may be called more than once.
func (r *RacingPrimary) Stop() (int, error) {
	r.stop()
	<-r.done
	var err error
	if p := r.errs.Load(); p != nil {
		err = *p
	}
	return int(r.rewrites.Load()), err
}

// Last is when the last rewrite was published.
func (r *RacingPrimary) Last() time.Time {
	return time.Unix(0, r.last.Load())
}
