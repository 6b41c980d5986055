package lifecycletest

import (
	"context"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// The suites run one test after another on one node: a prober must come
// up over a link a killed run left behind, and leave none behind itself.
func TestProberLinkReused(t *testing.T) {
	nstest.RequireRoot(t)
	node := nstest.New(t, "node")
	if err := node.Do(func() error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: proberLink}, PeerName: "stale1"})
	}); err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"after a stale link", "after a prober"} {
		t.Run(run, func(t *testing.T) {
			p := newProberOn(context.Background(), t, node.Path)
			node.Run(t, "ip", "addr", "show", proberLink)
			if out := p.ns.Run(t, "ip", "route", "get", proberNodeIP); out == "" {
				t.Fatal("no route to the node")
			}
		})
		if err := node.Do(func() error {
			_, err := netlink.LinkByName(proberLink)
			if err == nil {
				t.Errorf("%s: %s still in the node's netns after the prober's test", run, proberLink)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}
