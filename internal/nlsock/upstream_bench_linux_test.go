package nlsock

import (
	"testing"

	"github.com/mdlayher/netlink"
	vnl "github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// BenchmarkUpstreamRoute holds nlsock's rtnetlink use to
// vishvananda/netlink's: what Apply does beside an IPv6 sidecar's table,
// open its sockets in the pod's netns and dump lo's IPv6 addresses (root,
// real netns):
//
//		go test -run '^$' -bench Upstream -benchtime 2000x -count 6 ./internal/nlsock
//
//	  - nlsock: the netfilter and rtnetlink sockets in one visit, the dump
//	    over nlsock's Conn.
//	  - vishvananda: a Handle in the netns (NewHandleAt) for the dump, and
//	    mdlayher/netlink's Dial in the netns for the netfilter socket.
func BenchmarkUpstreamRoute(b *testing.B) {
	nstest.RequireRoot(b)
	h := nstest.New(b, "pod").Handle(b)
	b.Run("nlsock", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			socks, err := Open(h, unix.NETLINK_NETFILTER, unix.NETLINK_ROUTE)
			if err != nil {
				b.Fatal(err)
			}
			c := socks[1].Conn()
			if _, err := c.Execute(netlink.Message{
				Header: netlink.Header{Type: unix.RTM_GETADDR, Flags: netlink.Request | netlink.Dump},
				Data:   []byte{unix.AF_INET6, 0, 0, 0, 1, 0, 0, 0},
			}); err != nil {
				b.Fatal(err)
			}
			c.Close()
			socks[0].Close()
		}
	})
	b.Run("vishvananda", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			nf, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(h)})
			if err != nil {
				b.Fatal(err)
			}
			rt, err := vnl.NewHandleAt(h, unix.NETLINK_ROUTE)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := rt.AddrList(&vnl.Device{LinkAttrs: vnl.LinkAttrs{Index: 1}}, vnl.FAMILY_V6); err != nil {
				b.Fatal(err)
			}
			rt.Close()
			nf.Close()
		}
	})
}

// reportCPU reports the process's user+sys CPU per op (getrusage): it
// counts the goroutines and threads each library wakes, which wall time
// on a busy machine hides.
func reportCPU(b *testing.B) func() {
	now := func() int64 {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
		return ru.Utime.Nano() + ru.Stime.Nano()
	}
	c0 := now()
	return func() { b.ReportMetric(float64(now()-c0)/float64(b.N), "cpu-ns/op") }
}
