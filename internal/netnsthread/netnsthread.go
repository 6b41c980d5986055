// Package netnsthread runs a function inside a network namespace on an OS
// thread of its own, the one way the agent's code enters a pod's netns:
// the caller's thread never changes namespace, so callers may run from
// many goroutines at once.
package netnsthread

import (
	"fmt"
	"runtime"

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

func onThread(ns netns.NsHandle, fn func() error) (err error, restored bool) {
	home, err := netns.Get()
	if err != nil {
		return fmt.Errorf("this thread's netns: %w", err), true
	}
	defer home.Close()
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
