package nlsock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
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

// The kernel's errors come back as errors wrapping their errno, and
// replies to a request are checked against its sequence number.
func TestConnExecute(t *testing.T) {
	nstest.RequireRoot(t)
	pod := nstest.New(t, "pod")
	socks, err := Open(pod.Handle(t), unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	c := socks[0].Conn()
	defer c.Close()
	getLink := func(index int32) netlink.Message {
		data := make([]byte, unix.SizeofIfInfomsg)
		binary.NativeEndian.PutUint32(data[4:], uint32(index))
		return netlink.Message{Header: netlink.Header{Type: unix.RTM_GETLINK, Flags: netlink.Request}, Data: data}
	}
	if _, err := c.Execute(getLink(999)); !errors.Is(err, unix.ENODEV) {
		t.Errorf("GETLINK of a missing link: %v, want ENODEV", err)
	}
	replies, err := c.Execute(getLink(1))
	if err != nil || len(replies) != 1 || replies[0].Header.Type != unix.RTM_NEWLINK {
		t.Errorf("GETLINK of lo: %d replies, %v", len(replies), err)
	}
	// A reply left unread answers an earlier request: Execute refuses it.
	if _, err := c.SendMessages([]netlink.Message{getLink(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Execute(getLink(1)); err == nil || !strings.Contains(err.Error(), "reply") {
		t.Errorf("Execute took the reply to another request: %v", err)
	}
}

// appendMessage writes what mdlayher/netlink's MarshalBinary writes, the
// padding included.
func TestAppendMessageIsMarshalBinary(t *testing.T) {
	for n := range 9 {
		m := netlink.Message{
			Header: netlink.Header{Length: uint32(align(unix.NLMSG_HDRLEN + n)), Type: 0x1234, Flags: 0x0305, Sequence: 7, PID: 9},
			Data:   bytes.Repeat([]byte{0xab}, n),
		}
		want, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendMessage([]byte{1, 2}, m)
		if err != nil || !bytes.Equal(got[2:], want) {
			t.Errorf("%d bytes of data: %x, %v; want %x", n, got[2:], err, want)
		}
	}
}

// An inline socket reads without waiting first (its replies are queued
// before its send returns) and, when nothing is queued yet, waits as any
// other socket does: a receive started before its request still gets the
// reply.
func TestInlineReceiveWaitsWhenNothingIsQueued(t *testing.T) {
	nstest.RequireRoot(t)
	pod := nstest.New(t, "pod")
	socks, err := Open(pod.Handle(t), unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	s := socks[0]
	defer s.Close()
	if !s.inline {
		t.Fatal("a NETLINK_NETFILTER socket is not inline")
	}
	getGen := netlink.Message{
		Header: netlink.Header{Type: unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN, Flags: netlink.Request},
		Data:   []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	}
	c := s.Conn()
	waiting := make(chan struct{})
	waitingHook = sync.OnceFunc(func() { close(waiting) })
	defer func() { waitingHook = nil }()
	sent := make(chan error, 1)
	go func() {
		select {
		case <-waiting: // the receive found nothing and waits: now the request
		case <-time.After(5 * time.Second):
			sent <- errors.New("the receive never waited: no fallback from the raw read")
			return
		}
		_, err := c.SendMessages([]netlink.Message{getGen})
		sent <- err
	}()
	replies, err := c.Receive()
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if err != nil || len(replies) == 0 || replies[0].Header.Type != unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWGEN {
		t.Fatalf("receive begun before the request: %d replies (%v), want NEWGEN first", len(replies), err)
	}
	// And at once when the reply is queued: the send returned after it.
	if _, err := c.Execute(getGen); err != nil {
		t.Fatalf("GETGEN: %v", err)
	}
}
