package ztunnel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

func TestAddWithoutZtunnelFailsAtOnce(t *testing.T) {
	h := start(t, nil)
	w, _ := h.pod("a")
	// A deadline far beyond the Timeout: an Add that waited for a
	// ztunnel would fail with DeadlineExceeded instead.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := h.srv.Add(ctx, w)
	if !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Add with no ztunnel: %v, want ErrNotConnected", err)
	}
	if !strings.Contains(err.Error(), "no ztunnel connected") {
		t.Errorf("error %q does not say no ztunnel is connected", err)
	}
}

func TestAddGoesToNewestAndDelToAll(t *testing.T) {
	h := start(t, nil)
	old := connectZtunnel(t, h.path)
	old.snapshot()
	h.connected(1)
	upgraded := connectZtunnel(t, h.path)
	upgraded.snapshot()
	h.connected(2)

	w, ino := h.pod("a")
	h.addAcked(upgraded, w, ino) // the newest connection

	errc := h.del(context.Background(), "gone")
	// The old ztunnel's next request being the Del shows the Add skipped it.
	for name, z := range map[string]*fakeZtunnel{"old": old, "newest": upgraded} {
		if r := z.recv(); r.String() != "del:gone" {
			t.Fatalf("%s ztunnel got %s, want del:gone", name, r)
		}
		z.ack("")
	}
	if err := <-errc; err != nil {
		t.Fatalf("Del: %v", err)
	}
}

func TestDelWithoutZtunnelSucceeds(t *testing.T) {
	h := start(t, nil)
	if err := h.srv.Del(context.Background(), "a"); err != nil {
		t.Fatalf("Del with no ztunnel: %v", err)
	}
}

func TestAddReturnsZtunnelRefusal(t *testing.T) {
	h := start(t, nil)
	z := connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)

	w, _ := h.pod("a")
	errc := h.add(context.Background(), w)
	z.recv()
	z.ack("netns already in use")
	err := <-errc
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "netns already in use") {
		t.Fatalf("Add acked with an error returned %v", err)
	}

	// A refusal is an answer: the connection stays in step.
	errc = h.add(context.Background(), w)
	z.recv()
	z.ack("")
	if err := <-errc; err != nil {
		t.Fatalf("Add after a refusal: %v", err)
	}
}

func TestSlowAckFailsAddWithinItsDeadline(t *testing.T) {
	h := start(t, nil)
	z := connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)

	a, _ := h.pod("a")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	errc := h.add(ctx, a)
	z.recv()
	// Add returns before ztunnel acks.
	if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Add with an unacked request: %v, want DeadlineExceeded", err)
	}

	// Until the ack for a arrives nothing else is sent: b gives up
	// waiting for its turn and never reaches ztunnel.
	b, _ := h.pod("b")
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := h.srv.Add(ctx, b); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "to be free") {
		t.Fatalf("Add while a is unacked: %v, want a deadline waiting for the connection", err)
	}
	z.ack("") // late, but within the Timeout: the server still reads it

	c, _ := h.pod("c")
	h.addAcked(z, c, 0)
	h.connected(1)
}

func TestAddOfUnopenableNetnsSendsNothing(t *testing.T) {
	h := start(t, nil)
	z := connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)

	gone := Workload{UID: "gone", Netns: h.nsDir + "/gone"}
	if err := h.srv.Add(context.Background(), gone); !errors.Is(err, podns.ErrNotExist) {
		t.Fatalf("Add of a missing netns: %v, want ErrNotExist", err)
	}
	w, _ := h.pod("a")
	h.addAcked(z, w, 0) // nothing was sent for the missing netns
}

func TestConcurrentAddsAreSerialised(t *testing.T) {
	h := start(t, nil)
	z := connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)

	base, ino := h.pod("shared")
	const n = 16
	var want []string
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		w := base
		w.UID = fmt.Sprintf("w%02d", i)
		want = append(want, "add:"+w.UID)
		wg.Go(func() { errs <- h.srv.Add(context.Background(), w) })
	}
	var got []string
	for range n {
		r := z.recv() // fails on anything but one netns fd per Add
		if r.netns != ino {
			t.Errorf("%s carried netns %d, want %d", r, r.netns, ino)
		}
		got = append(got, r.String())
		z.ack("")
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Add: %v", err)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("ztunnel got %v, want %v", got, want)
	}
}

func TestNetnsFdsAreClosed(t *testing.T) {
	h := start(t, nil)
	h.enroll("a")
	h.enrollGone("b")
	z := connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)
	w, _ := h.pod("c")

	before := openFDs(t)
	for i := range 20 {
		errc := h.add(context.Background(), w)
		z.recv()
		if i%2 == 0 {
			z.ack("")
		} else {
			z.ack("refused")
		}
		<-errc
	}
	if err := h.srv.Add(context.Background(), Workload{UID: "x", Netns: h.nsDir + "/gone"}); err == nil {
		t.Fatal("Add of a missing netns succeeded")
	}
	// A reconnect sends the snapshot's fds again.
	z.uc.Close()
	h.connected(0)
	z = connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)
	// The dropped connection's own fd is closed just after it stops
	// counting as connected.
	nstest.Eventually(t, 5*time.Second, func() bool { return openFDs(t) == before },
		"%d fds open before the Adds and the reconnect, not as many after", before)
}

// AwaitConnection with no ztunnel waits for one:
// the ztunnel that connects gets the pod in its snapshot (it was listed
// first), then the Add itself, and the Add succeeds. Before, the ADD
// failed at once and the runtime retried only after the kubelet's backoff.
func TestAwaitConnectionWaitsForAZtunnel(t *testing.T) {
	h := start(t, func(c *Config) { c.ConnectWait = time.Minute })
	w, ino := h.enroll("a")
	errc := make(chan error, 1)
	go func() {
		ctx := context.Background()
		if err := h.srv.AwaitConnection(ctx, w); err != nil {
			errc <- err
			return
		}
		errc <- h.srv.Add(ctx, w)
	}()
	nstest.Eventually(t, 5*time.Second, func() bool { return len(h.srv.waiting) == 1 }, "want the ADD waiting")
	select {
	case err := <-errc:
		t.Fatalf("AwaitConnection and Add returned %v with no ztunnel connected, want them to wait", err)
	default:
	}
	z := connectZtunnel(t, h.path)
	if got := kinds(z.snapshot()); !slices.Equal(got, []string{"add:a", "snapshot_sent"}) {
		t.Fatalf("snapshot %v, want the waiting pod in it", got)
	}
	if r := z.recv(); r.String() != "add:a" || r.netns != ino {
		t.Fatalf("ztunnel got %s (netns %d), want add:a (netns %d)", r, r.netns, ino)
	}
	z.ack("")
	if err := <-errc; err != nil {
		t.Fatalf("Add: %v", err)
	}
}

// With ConnectWait negative, AwaitConnection returns at once, and the Add
// after it fails at once without a ztunnel.
func TestAwaitConnectionWithoutWaitReturnsAtOnce(t *testing.T) {
	h := start(t, func(c *Config) { c.ConnectWait = -1 })
	w, _ := h.pod("a")
	if err := h.srv.AwaitConnection(context.Background(), w); err != nil {
		t.Fatalf("AwaitConnection with no wait configured: %v", err)
	}
	if err := h.srv.Add(context.Background(), w); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Add: %v, want ErrNotConnected", err)
	}
}

// The wait ends with ErrNotConnected when no ztunnel comes within
// ConnectWait, or before it when the caller's deadline passes.
func TestAwaitConnectionGivesUp(t *testing.T) {
	h := start(t, func(c *Config) { c.ConnectWait = 300 * time.Millisecond })
	w, _ := h.pod("a")
	err := h.srv.AwaitConnection(context.Background(), w)
	if !errors.Is(err, ErrNotConnected) || !strings.Contains(err.Error(), "waited for one 300ms") {
		t.Fatalf("AwaitConnection after ConnectWait: %v, want ErrNotConnected saying it waited", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	h2 := start(t, func(c *Config) { c.ConnectWait = time.Minute })
	err = h2.srv.AwaitConnection(ctx, w)
	if !errors.Is(err, ErrNotConnected) || !strings.Contains(err.Error(), "until the caller's deadline") {
		t.Fatalf("AwaitConnection past the caller's deadline: %v, want ErrNotConnected saying so", err)
	}
}

// At most MaxWaiting wait; the next fails at once, so a ztunnel that stays
// away holds a bounded share of the agent's ADD slots.
func TestAwaitConnectionWaitersAreBounded(t *testing.T) {
	h := start(t, func(c *Config) { c.ConnectWait = time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	w, _ := h.pod("a")
	var waiting []chan error
	for range MaxWaiting {
		errc := make(chan error, 1)
		go func() { errc <- h.srv.AwaitConnection(ctx, w) }()
		waiting = append(waiting, errc)
	}
	nstest.Eventually(t, 5*time.Second, func() bool { return len(h.srv.waiting) == MaxWaiting }, "want %d waiting", MaxWaiting)
	begin := time.Now()
	err := h.srv.AwaitConnection(ctx, w)
	if !errors.Is(err, ErrNotConnected) || !strings.Contains(err.Error(), fmt.Sprintf("%d ADDs wait for one already", MaxWaiting)) {
		t.Fatalf("AwaitConnection past MaxWaiting: %v, want ErrNotConnected saying the waiters are full", err)
	}
	if d := time.Since(begin); d > time.Second {
		t.Errorf("AwaitConnection past MaxWaiting took %v, want it at once", d)
	}
	cancel()
	for _, errc := range waiting {
		if err := <-errc; !errors.Is(err, ErrNotConnected) {
			t.Errorf("cancelled wait: %v, want ErrNotConnected", err)
		}
	}
	if n := len(h.srv.waiting); n != 0 {
		t.Errorf("%d waiting slots held after every waiter returned", n)
	}
}

// A ztunnel that died without the server noticing yet (here: it stopped
// reading, so the server's write fails with EPIPE while its idle watch
// sees nothing) fails the Add as "no ztunnel connected", the answer the
// runtime retries (code 11) and Store.Enroll waits on, and the connection
// is dropped. Before, the write's "broken pipe" failed the ADD at once as
// an internal error (code 999).
func TestAddOnADeadConnectionIsNotConnected(t *testing.T) {
	h := start(t, nil)
	z := connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)
	f, err := z.uc.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Shutdown(int(f.Fd()), unix.SHUT_RD); err != nil {
		t.Fatal(err)
	}
	w, _ := h.pod("a")
	err = h.srv.Add(context.Background(), w)
	if !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Add on a dead connection: %v, want ErrNotConnected", err)
	}
	h.connected(0)
}
