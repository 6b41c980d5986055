package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"

	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/internal/netnsthread"
)

// sock is a blocking NETLINK_NETFILTER socket opened in a pod's netns: a
// netlink.Socket for mdlayher/netlink's NewConn, the transport both the
// batch (batch_linux.go) and google/nftables' reads (Verify) use.
//
// Why not netlink.Dial: mdlayher/socket (v0.6.1) starts a goroutine for
// every send and every receive to watch a context that, from netlink.Conn,
// is always context.Background; each one wakes an idle P through a futex.
// A verify is ~20 of them, a third of its CPU (docs/benchmarks.md). The
// kernel answers a netfilter request before sendmsg returns or within
// microseconds, so a blocking fd with a receive timeout loses nothing.
//
// Replies are handed on with port id 0, as the kernel's own messages
// carry: a netlink.Conn checks a reply's port id against the one it
// believes it has unless either is 0, and the nltest Conn google/nftables
// builds believes it is nltest.PID. The socket joins no group, so every
// reply on it is for it; the kernel binds it on the first send.
type sock struct{ fd int }

// bufs holds receive buffers: a netlink dump reply is at most 32 KiB
// (the kernel caps its dump skbs there), so 64 KiB never truncates.
var bufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// openSock opens a netfilter socket inside ns. A zero or negative handle
// would mean "the calling thread's namespace" and silently program the
// agent's own netns; it is refused instead.
func openSock(ns netns.NsHandle) (*sock, error) {
	if int(ns) <= 0 {
		return nil, fmt.Errorf("netns handle %d is not an open namespace", int(ns))
	}
	fd, err := socketIn(ns)
	if err != nil {
		return nil, fmt.Errorf("open netlink in netns fd %d: %w", int(ns), err)
	}
	s := &sock{fd: fd}
	if err := s.setup(); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open netlink in netns fd %d: %w", int(ns), err)
	}
	return s, nil
}

func (s *sock) setup() error {
	tv := unix.NsecToTimeval(replyTimeout.Nanoseconds())
	for _, opt := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
		if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, opt, &tv); err != nil {
			return fmt.Errorf("set socket timeout: %w", err)
		}
	}
	return nil
}

// socketIn creates the socket inside ns (netnsthread: a thread of its
// own, moved in and back; a socket keeps the netns it was made in).
func socketIn(ns netns.NsHandle) (int, error) {
	fd := -1
	err := netnsthread.Do(ns, func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER); err != nil {
			fd = -1
			return fmt.Errorf("socket: %w", err)
		}
		return nil
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, err
	}
	return fd, nil
}

// conn is a netlink.Conn over s, as the batch uses it.
func (s *sock) conn() *netlink.Conn { return netlink.NewConn(s, 0) }

func (s *sock) Close() error { return unix.Close(s.fd) }

func (s *sock) Send(m netlink.Message) error { return s.SendMessages([]netlink.Message{m}) }

// SendMessages writes msgs in one sendmsg, as netlink.Conn does: a batch
// must reach the kernel in one datagram to be one transaction.
func (s *sock) SendMessages(msgs []netlink.Message) error {
	var b []byte
	for _, m := range msgs {
		mb, err := m.MarshalBinary()
		if err != nil {
			return err
		}
		b = append(b, mb...)
	}
	for {
		err := unix.Sendto(s.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func (s *sock) Receive() ([]netlink.Message, error) {
	var out []netlink.Message
	for m, err := range s.ReceiveIter() {
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// ReceiveIter reads one datagram and yields its messages. They are parsed
// from a copy, so nothing aliases the pooled buffer.
func (s *sock) ReceiveIter() iter.Seq2[netlink.Message, error] {
	return func(yield func(netlink.Message, error) bool) {
		data, err := s.recv()
		if err != nil {
			yield(netlink.Message{}, err)
			return
		}
		for len(data) >= unix.NLMSG_HDRLEN {
			n := int(binary.NativeEndian.Uint32(data))
			an := (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
			if n < unix.NLMSG_HDRLEN || an > len(data) {
				yield(netlink.Message{}, fmt.Errorf("netlink: malformed reply (length %d of %d bytes)", n, len(data)))
				return
			}
			var m netlink.Message
			if err := m.UnmarshalBinary(data[:an]); err != nil {
				yield(netlink.Message{}, err)
				return
			}
			m.Header.PID = 0
			if !yield(m, nil) {
				return
			}
			data = data[an:]
		}
	}
}

func (s *sock) recv() ([]byte, error) {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	for {
		n, _, flags, _, err := unix.Recvmsg(s.fd, *bp, nil, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return nil, fmt.Errorf("recvmsg: no reply from the kernel within %s", replyTimeout)
		case err != nil:
			return nil, fmt.Errorf("recvmsg: %w", err)
		case flags&unix.MSG_TRUNC != 0:
			return nil, fmt.Errorf("recvmsg: reply larger than %d bytes", len(*bp))
		}
		return slices.Clone((*bp)[:n]), nil
	}
}

// exchange is s as an nltest.Func, the transport google/nftables takes
// through WithTestDial: a request is sent and its replies are left for the
// next receive (req nil), which reads one datagram.
func (s *sock) exchange(req []netlink.Message) ([]netlink.Message, error) {
	if req != nil {
		return nil, s.SendMessages(req)
	}
	return s.Receive()
}
