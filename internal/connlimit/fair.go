package connlimit

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Peer is who a connection comes from, as a Classify function says.
type Peer struct {
	// Bucket is what the per-peer bound counts in (an address, say).
	Bucket string
	// First connections are served ahead of the queue (the kubelet's
	// probes): a flood queued for the shared slots never delays them.
	First bool
}

// Classify names the peer of an accepted connection.
type Classify func(net.Conn) Peer

// Bounds of a Fair listener.
type Bounds struct {
	Serving int // connections served at once, First ones aside
	First   int // First connections served at once beside Serving
	Waiting int // connections accepted and waiting for a slot; past it, closed
	PerPeer int // open connections (served or waiting) of one bucket
}

// Fair serves l's connections so that a flood cannot hold a trusted peer
// off. It accepts as fast as the kernel queues connections (a probe left
// in the kernel's backlog waits behind every connection queued before it:
// under 2,000 flooding clients the kubelet's probes took up to 0.7 s of
// their 1 s); a connection past its bucket's PerPeer is closed at once; a
// First one is served at once while a First slot is free; every other one
// waits, in arrival order and at most Waiting of them, for one of the
// Serving slots (past Waiting it is closed at once). A waiting connection
// costs a descriptor, no goroutine.
func Fair(l net.Listener, b Bounds, classify Classify) net.Listener {
	f := &fair{Listener: l, classify: classify, max: b.PerPeer, open: map[string]int{},
		serving: make(chan struct{}, b.Serving), first: make(chan struct{}, b.First),
		waiting: make(chan *Conn, b.Waiting), ready: make(chan net.Conn),
		closed: make(chan struct{}), done: make(chan struct{})}
	go f.acceptLoop()
	go f.dispatch()
	return f
}

type fair struct {
	net.Listener
	classify Classify
	max      int

	mu   sync.Mutex
	open map[string]int

	serving, first chan struct{}
	waiting        chan *Conn
	ready          chan net.Conn

	closeOnce sync.Once
	closed    chan struct{} // Close was called
	done      chan struct{} // acceptLoop ended; err says why
	err       error
}

func (f *fair) Accept() (net.Conn, error) {
	select {
	case c := <-f.ready:
		return c, nil
	case <-f.done:
		return nil, f.err
	}
}

func (f *fair) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return f.Listener.Close()
}

// acceptLoop drains the kernel's queue, sorting each connection: closed,
// served at once, or queued for dispatch.
func (f *fair) acceptLoop() {
	defer close(f.waiting)
	var pause time.Duration
	for {
		c, err := f.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				f.err = err
				close(f.done)
				return
			}
			// Out of descriptors, say: as net/http's own loop does, try
			// again after a pause that grows to a second.
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			time.Sleep(pause)
			continue
		}
		pause = 0
		peer := f.classify(c)
		if !f.take(peer.Bucket) {
			c.Close()
			continue
		}
		conn := &Conn{Conn: c, release: func() { f.give(peer.Bucket) }}
		if peer.First && f.hand(conn, f.first) {
			continue
		}
		select {
		case f.waiting <- conn:
		default:
			conn.Close()
		}
	}
}

// hand serves c at once when one of slots is free.
func (f *fair) hand(c *Conn, slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
	default:
		return false
	}
	f.deliver(c, slots)
	return true
}

// dispatch serves the waiting connections in arrival order, each when a
// shared slot frees. It takes the slot first, so the queue alone holds
// what waits.
func (f *fair) dispatch() {
	for {
		select {
		case f.serving <- struct{}{}:
		case <-f.closed:
			for c := range f.waiting {
				c.Close()
			}
			return
		}
		c, ok := <-f.waiting
		if !ok {
			return
		}
		f.deliver(c, f.serving)
	}
}

// deliver gives c, holding a slot of slots, to Accept; the slot frees when
// c closes.
func (f *fair) deliver(c *Conn, slots chan struct{}) {
	bucket := c.release
	c.release = func() { bucket(); <-slots }
	select {
	case f.ready <- c:
	case <-f.closed:
		c.Close()
	}
}

func (f *fair) take(bucket string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open[bucket] >= f.max {
		return false
	}
	f.open[bucket]++
	return true
}

func (f *fair) give(bucket string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open[bucket]--; f.open[bucket] <= 0 {
		delete(f.open, bucket)
	}
}
