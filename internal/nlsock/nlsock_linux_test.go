package nlsock

import (
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/internal/nstest"
)

// Every socket Open makes in one visit is in the netns asked for: a link
// dump over the rtnetlink one lists the pod's lo only, not the machine's
// links; and a handle that is no namespace is refused, not taken to mean
// the agent's own.
func TestOpenIsInTheNamespace(t *testing.T) {
	nstest.RequireRoot(t)
	pod := nstest.New(t, "pod")
	socks, err := Open(pod.Handle(t), unix.NETLINK_NETFILTER, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	if len(socks) != 2 {
		t.Fatalf("Open made %d sockets, want 2", len(socks))
	}
	defer socks[0].Close()
	c := socks[1].Conn()
	defer c.Close()
	replies, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request | netlink.Dump},
		Data:   make([]byte, unix.SizeofIfInfomsg),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(replies) != 1 {
		t.Errorf("the link dump listed %d links, want the pod's lo alone", len(replies))
	}
	if _, err := Open(netns.NsHandle(-1), unix.NETLINK_ROUTE); err == nil {
		t.Error("Open with handle -1: no error")
	}
}
