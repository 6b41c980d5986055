// Package netnsthread runs a function inside a network namespace on an OS
// thread of its own, the one way the agent's code enters a pod's netns:
// the caller's thread never changes namespace, so callers may run from
// many goroutines at once.
//
// The agent's own netns is opened once and kept: a thread goes back to
// that handle, not to one opened from /proc/thread-self per call, so every
// thread the runtime hands out is in the agent's netns, and a thread that
// could not be moved back is never unlocked (the runtime then ends it).
package netnsthread

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/vishvananda/netns"
)

// Do runs fn on a locked thread moved into ns, then moves the thread back
// to where it came from. fn's error is returned; an error moving the
// thread back is returned too (wrapped with fn's), and that thread is
// never handed back to the scheduler: it stays locked and Go ends it with
// the goroutine, so nothing else ever runs in the pod's namespace.
func Do(ns netns.NsHandle, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err, restored := onThread(ns, fn)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// home is the agent's own netns, opened by the first Do from the thread
// it runs on and kept: every thread the runtime hands a goroutine is in it
// (the runtime starts a thread for a locked caller from a clean template
// thread, and Do never unlocks a thread it could not move back), so it is
// where each Do's thread comes from. Opening /proc/thread-self/ns/net on
// every Do was half of the cost of opening a pod's netlink sockets. A
// failed open is not kept: the next Do tries again.
var home struct {
	mu sync.Mutex
	h  netns.NsHandle
	ok bool
}

func homeNS() (netns.NsHandle, error) {
	home.mu.Lock()
	defer home.mu.Unlock()
	if home.ok {
		return home.h, nil
	}
	h, err := netns.Get()
	if err != nil {
		return netns.None(), err
	}
	home.h, home.ok = h, true
	return h, nil
}

func onThread(ns netns.NsHandle, fn func() error) (err error, restored bool) {
	home, err := homeNS()
	if err != nil {
		return fmt.Errorf("this thread's netns: %w", err), true
	}
	if err := netns.Set(ns); err != nil {
		return fmt.Errorf("enter netns fd %d: %w", int(ns), err), true
	}
	ferr := fn()
	if rerr := netns.Set(home); rerr != nil {
		if ferr == nil {
			ferr = fmt.Errorf("in netns fd %d: done", int(ns))
		}
		return fmt.Errorf("%w; then moving the thread back: %v", ferr, rerr), false
	}
	return ferr, true
}
