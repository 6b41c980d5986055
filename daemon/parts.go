package main

import (
	"context"

	"github.com/sluicemesh/sluice/daemon/metrics"
)

// part is an optional piece of the agent, present only when the flags ask
// for it: Kubernetes policy with its informers, the ambient node, the
// installer, the running-pod checks, NRI, the startup taint. newAgent's
// build steps append the parts present to a.parts, each built with all it
// needs; run, registerMetrics and shutdown go through the list, in its
// order, and never ask which parts are there. A new part is a type in its
// own file and one build step in newAgent.
type part interface {
	// start runs the part's background work until ctx ends, before the
	// socket serves; fail ends the agent with a later error.
	start(ctx context.Context, fail func(error)) error
	// serving runs what must wait until the socket serves (the conflist
	// entry that sends the runtime's calls to it).
	serving(ctx context.Context, fail func(error))
	// metrics registers the part's metrics, read at scrape time; a part
	// the agent runs without registers nothing, so its metric is absent
	// rather than a misleading 0.
	metrics(m *metrics.Metrics)
	// leavesState reports whether the part leaves something on the node
	// that an uninstall must take away (and so whether to ask the API
	// server if the agent is leaving).
	leavesState() bool
	// stop runs at shutdown twice: before the drain of calls in flight
	// (drained false) and after the background has stopped (drained
	// true); leaving says the agent is leaving the node.
	stop(leaving, drained bool)
}

// basePart is the part that does nothing; parts embed it and define only
// the steps they take.
type basePart struct{}

func (basePart) start(context.Context, func(error)) error { return nil }
func (basePart) serving(context.Context, func(error))     {}
func (basePart) metrics(*metrics.Metrics)                 {}
func (basePart) leavesState() bool                        { return false }
func (basePart) stop(bool, bool)                          {}

// startParts starts every part in order. When one fails, the parts
// already started are stopped as at shutdown, in reverse, and never as
// leaving (a failed start is not an uninstall): stop before the drain,
// the background ended, stop after it. The failing part's own start
// leaves nothing running.
func (a *agent) startParts() error {
	for i, p := range a.parts {
		if err := p.start(a.ctx, a.fail); err != nil {
			started := a.parts[:i]
			stopInReverse(started, false, false)
			a.stopBackground()
			stopInReverse(started, false, true)
			return err
		}
	}
	return nil
}

// fail ends the running agent with err.
func (a *agent) fail(err error) { a.errc <- err }

// leavesState reports whether any part leaves state on the node.
func (a *agent) leavesState() bool {
	for _, p := range a.parts {
		if p.leavesState() {
			return true
		}
	}
	return false
}

// stopParts stops every part, last started first: a part may rely on one
// built before it (the running-pod checks enrol ambient pods through the
// ambient node's ZDS server, so they stop before it).
func (a *agent) stopParts(leaving, drained bool) {
	stopInReverse(a.parts, leaving, drained)
}

func stopInReverse(parts []part, leaving, drained bool) {
	for i := len(parts) - 1; i >= 0; i-- {
		parts[i].stop(leaving, drained)
	}
}
