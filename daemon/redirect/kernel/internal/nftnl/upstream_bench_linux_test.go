package nftnl

import (
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
	"github.com/sluicemesh/sluice/internal/nlsock"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// The benchmarks below hold nlsock (internal/nlsock) to the upstream
// libraries it stands in for, on the same table in a real netns (root):
//
//	go test -run '^$' -bench 'Upstream' -benchtime 2000x -count 6 ./daemon/redirect/kernel/internal/nftnl
//
//   - product: Apply as the agent runs it (GET, cached batch, one ACK, nlsock).
//   - nlsock: the batch marshalled afresh, sent with one ACK on an nlsock socket.
//   - mdlayher: the same batch and flags on mdlayher/netlink's Dial in the netns
//     (what google/nftables uses underneath): the socket layer alone differs.
//   - nftables: google/nftables as a library user would run it (WithNetNSFd,
//     its own flags: an ACK and echo per message), the Conn kept for the batch.
//
// Every variant closes its socket off the timed path, as Apply does
// (closeLater), and the closes are waited for off the clock before the
// next op (drain): closing after a delete waits out an RCU grace period,
// which would otherwise fall on whichever op comes next. cpu-ns/op is the
// process's user+sys CPU over the op alone (getrusage), which counts the
// goroutines and threads each library wakes; ns/op is wall time.

type applyFunc func(b *testing.B, h netns.NsHandle, t *nft.Table, replace bool)

func applyProduct(b *testing.B, h netns.NsHandle, t *nft.Table, _ bool) {
	if _, _, err := apply(h, t); err != nil {
		b.Fatal(err)
	}
}

func freshBatch(b *testing.B, t *nft.Table, replace bool) []netlink.Message {
	p := newProgram(t)
	batch, err := marshal(func(c *nftables.Conn) error { return p.build(c, replace) })
	if err != nil {
		b.Fatal(err)
	}
	prepare(batch, false)
	return batch
}

func applyNlsock(b *testing.B, h netns.NsHandle, t *nft.Table, replace bool) {
	batch := freshBatch(b, t, replace)
	s, err := open(h)
	if err != nil {
		b.Fatal(err)
	}
	defer closeLater(s)
	if _, err := s.sendBatch(batch, false); err != nil {
		b.Fatal(err)
	}
}

func applyMdlayher(b *testing.B, h netns.NsHandle, t *nft.Table, replace bool) {
	batch := freshBatch(b, t, replace)
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(h)})
	if err != nil {
		b.Fatal(err)
	}
	defer closeLater(c)
	sent, err := c.SendMessages(batch)
	if err != nil {
		b.Fatal(err)
	}
	last := sent[len(sent)-2].Header.Sequence
	for {
		replies, err := c.Receive()
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range replies {
			if m.Header.Type == netlink.Error && m.Header.Sequence == last {
				return
			}
		}
	}
}

type lasting struct{ c *nftables.Conn }

func (l lasting) Close() error { return l.c.CloseLasting() }

func applyNftables(b *testing.B, h netns.NsHandle, t *nft.Table, replace bool) {
	c, err := nftables.New(nftables.WithNetNSFd(int(h)), nftables.AsLasting())
	if err != nil {
		b.Fatal(err)
	}
	defer closeLater(lasting{c})
	if err := newProgram(t).build(c, replace); err != nil {
		b.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		b.Fatal(err)
	}
}

var applyVariants = []struct {
	name string
	f    applyFunc
}{{"product", applyProduct}, {"nlsock", applyNlsock}, {"mdlayher", applyMdlayher}, {"nftables", applyNftables}}

// drain waits until every socket handed to closeLater so far is closed:
// the one closer takes them in order.
func drain() {
	done := make(chan struct{})
	closeLater(closerFunc(func() error { close(done); return nil }))
	<-done
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// timed runs op b.N times with the table's set-up (before) and the
// sockets' closing off the clock, and reports the CPU of op alone.
func timed(b *testing.B, before, op func()) {
	var cpu int64
	for b.Loop() {
		b.StopTimer()
		before()
		drain()
		b.StartTimer()
		c0 := cpuNow()
		op()
		cpu += cpuNow() - c0
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

func cpuNow() int64 {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkUpstreamApplyFresh: a new pod's table, created into a netns
// that holds none (the table is removed off the clock between ops).
func BenchmarkUpstreamApplyFresh(b *testing.B) {
	wide, _ := testTables()
	for _, v := range applyVariants {
		b.Run(v.name, func(b *testing.B) {
			h := nstest.New(b, "pod").Handle(b)
			timed(b, func() {
				if err := Remove(h, wide.Name); err != nil {
					b.Fatal(err)
				}
			}, func() { v.f(b, h, wide, false) })
		})
	}
}

// BenchmarkUpstreamApplyReplace: the table replaced in place (re-ADD,
// reassert): add, delete, add and fill in one batch.
func BenchmarkUpstreamApplyReplace(b *testing.B) {
	wide, _ := testTables()
	for _, v := range applyVariants {
		b.Run(v.name, func(b *testing.B) {
			h := nstest.New(b, "pod").Handle(b)
			applyProduct(b, h, wide, true)
			timed(b, func() {}, func() { v.f(b, h, wide, true) })
		})
	}
}

// BenchmarkUpstreamVerify: the table read back whole and compared, over
// nlsock (what Verify does once the generation moved) and over
// google/nftables' own socket.
func BenchmarkUpstreamVerify(b *testing.B) {
	wide, _ := testTables()
	read := map[string]func(h netns.NsHandle) (*nftables.Conn, func()){
		"nlsock": func(h netns.NsHandle) (*nftables.Conn, func()) {
			socks, err := nlsock.Open(h, unix.NETLINK_NETFILTER)
			if err != nil {
				b.Fatal(err)
			}
			c, err := nftables.New(nftables.WithTestDial(socks[0].Exchange), nftables.AsLasting())
			if err != nil {
				b.Fatal(err)
			}
			return c, func() { closeLater(socks[0]) }
		},
		"nftables": func(h netns.NsHandle) (*nftables.Conn, func()) {
			c, err := nftables.New(nftables.WithNetNSFd(int(h)), nftables.AsLasting())
			if err != nil {
				b.Fatal(err)
			}
			return c, func() { closeLater(lasting{c}) }
		},
	}
	for _, name := range []string{"nlsock", "nftables"} {
		b.Run(name, func(b *testing.B) {
			h := nstest.New(b, "pod").Handle(b)
			applyProduct(b, h, wide, false)
			timed(b, func() {}, func() {
				c, done := read[name](h)
				drift, _, err := tableDrift(c, wide)
				done()
				if err != nil || len(drift) > 0 {
					b.Fatalf("drift %q, %v", drift, err)
				}
			})
		})
	}
}
