// Package nlsock is blocking netlink sockets opened inside a network
// namespace, several in one visit: the transport of package nft's batches
// and reads (NETLINK_NETFILTER) and of redirect's rtnetlink requests.
//
// Why not the libraries' own sockets: mdlayher/socket (under
// mdlayher/netlink, under google/nftables) starts a goroutine per send and
// per receive to watch a context that is always context.Background, each
// waking an idle P; vishvananda/netlink's Handle is another netns visit
// and an epoll-registered socket; mdlayher's NewConn seeds a math/rand
// source per socket. nlsock opens the sockets a visit needs (netfilter,
// and rtnetlink when lo or routes need it) as blocking fds with a Conn of
// its own (numbering, errno errors, sequence check); google/nftables still
// marshals and decodes through Sock.Exchange, and vishvananda/netlink
// still builds address messages and serves routes and rules. Netfilter
// sockets send and read with raw syscalls (nf_tables does a batch's work
// inside sendmsg, and a raw call keeps the P that sysmon would otherwise
// hand off mid-commit), a read falling back to a blocking one when nothing
// is queued; rtnetlink's requests can sleep on RTNL and must not hold a P.
//
// It is kept only while a benchmark says it pays: BenchmarkUpstreamRoute
// here and BenchmarkUpstream* in daemon/redirect/kernel/internal/nftnl hold it to
// mdlayher/netlink, google/nftables and vishvananda/netlink on the same
// work (figures: docs/history/performance.md, "netlink sockets against the
// upstream libraries"). It can go when a google/nftables release carries
// its unreleased batch changes (no ACK asked per message, replies drained
// without counting: google/nftables#330, #336), which would also retire
// nftnl's one-ACK send, and these benchmarks then show mdlayher/netlink
// (or a socket google/nftables opens itself) within a few percent of
// nlsock. The gap left with mdlayher/socket v0.8.0 is mdlayher/netlink's
// own: a netns visit per socket in Dial, the runtime poller registration,
// an MSG_PEEK before every read, a math/rand source seeded per Conn. For
// rtnetlink, vishvananda/netlink would need a Handle built over a
// caller's socket (or several opened in one visit) that decodes IFA_PROTO,
// which nlsock's address dump reads and v1.3.1 drops.
package nlsock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/internal/netnsthread"
)

// Sock is a blocking netlink socket opened in a pod's netns: a
// netlink.Socket for mdlayher/netlink's NewConn.
//
// Why not netlink.Dial: mdlayher/socket (v0.6.1) starts a goroutine for
// every send and every receive to watch a context that, from netlink.Conn,
// is always context.Background; each one wakes an idle P through a futex.
// A verify is ~20 of them, a third of its CPU (docs/history/performance.md). The
// kernel answers a netlink request before sendmsg returns or within
// microseconds, so a blocking fd with a receive timeout loses nothing.
//
// Replies are handed on with port id 0, as the kernel's own messages
// carry: a netlink.Conn checks a reply's port id against the one it
// believes it has unless either is 0, and the nltest Conn google/nftables
// builds believes it is nltest.PID. The socket joins no group, so every
// reply on it is for it; the kernel binds it on the first send.
type Sock struct {
	fd int
	// inline: the kernel does a request's work on the sending thread,
	// inside sendmsg, and has queued every reply when it returns
	// (NETLINK_NETFILTER: nf_tables runs a batch and its commit there).
	// Such a socket is written and read with raw syscalls: see rawSend.
	inline bool
}

// ReplyTimeout bounds every wait for the kernel: nothing on the ADD path
// blocks without a deadline. The kernel answers in microseconds to
// milliseconds; this is for a kernel that never answers.
const ReplyTimeout = 10 * time.Second

// bufs holds receive buffers: a netlink dump reply is at most 32 KiB
// (the kernel caps its dump skbs there), so 64 KiB never truncates.
var bufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// Open opens one socket per protocol inside ns, in one visit of a thread
// to ns (entering a netns is the dearer part of a socket there). A zero or
// negative handle would mean "the calling thread's namespace" and silently
// open in the agent's own netns; it is refused instead.
func Open(ns netns.NsHandle, protocols ...int) ([]*Sock, error) {
	if int(ns) <= 0 {
		return nil, fmt.Errorf("netns handle %d is not an open namespace", int(ns))
	}
	fds, err := socketsIn(ns, protocols)
	if err != nil {
		return nil, fmt.Errorf("open netlink in netns fd %d: %w", int(ns), err)
	}
	out := make([]*Sock, len(fds))
	for i, fd := range fds {
		out[i] = &Sock{fd: fd, inline: protocols[i] == unix.NETLINK_NETFILTER}
		if err := out[i].setup(); err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("open netlink in netns fd %d: %w", int(ns), err)
		}
	}
	return out, nil
}

func (s *Sock) setup() error {
	tv := unix.NsecToTimeval(ReplyTimeout.Nanoseconds())
	for _, opt := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
		if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, opt, &tv); err != nil {
			return fmt.Errorf("set socket timeout: %w", err)
		}
	}
	return nil
}

// socketsIn creates the sockets inside ns (netnsthread: a thread of its
// own, moved in and back; a socket keeps the netns it was made in).
func socketsIn(ns netns.NsHandle, protocols []int) ([]int, error) {
	var fds []int
	err := netnsthread.Do(ns, func() error {
		for _, p := range protocols {
			fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, p)
			if err != nil {
				return fmt.Errorf("socket (netlink protocol %d): %w", p, err)
			}
			fds = append(fds, fd)
		}
		return nil
	})
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	return fds, nil
}

func (s *Sock) Close() error { return unix.Close(s.fd) }

func (s *Sock) Send(m netlink.Message) error { return s.SendMessages([]netlink.Message{m}) }

// SendMessages writes msgs in one sendmsg, as netlink.Conn does: a batch
// must reach the kernel in one datagram to be one transaction.
func (s *Sock) SendMessages(msgs []netlink.Message) error {
	n := 0
	for _, m := range msgs {
		n += int(m.Header.Length)
	}
	b := make([]byte, 0, n)
	for _, m := range msgs {
		var err error
		if b, err = appendMessage(b, m); err != nil {
			return err
		}
	}
	for {
		var err error
		if s.inline {
			err = rawSend(s.fd, b)
		} else {
			err = unix.Sendto(s.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		}
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// kernelAddr is the kernel's netlink address, every send's destination.
var kernelAddr = unix.RawSockaddrNetlink{Family: unix.AF_NETLINK}

// rawSend is sendto(2) without the runtime's syscall bookkeeping, for an
// inline socket. Through unix.Sendto, a thread still in the kernel at the
// next sysmon tick (20-40 µs; an nf_tables commit takes 100 µs and more)
// has its P taken and handed to another thread, which is woken to run it,
// and on return it must find a P again or sleep: two thread switches per
// commit while the agent is busy, with sysmon polling every 20 µs as long
// as it keeps finding such Ps. The thread is using its core in the kernel
// all along, so the P is lent to no purpose; a raw syscall keeps it
// (measured with the DEL path's other cuts: docs/history/performance.md).
// The price: a stop-the-world waits for the send to return. Only inline
// sockets: an rtnetlink request can sleep on the machine-wide RTNL mutex,
// which a netns teardown holds for milliseconds, and must not hold a P.
func rawSend(fd int, b []byte) error {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		0, uintptr(unsafe.Pointer(&kernelAddr)), unix.SizeofSockaddrNetlink)
	if e != 0 {
		return e
	}
	return nil
}

// rawRecv is recvmsg(2) with MSG_DONTWAIT, raw, for an inline socket,
// whose replies are queued before its send returns (a dump's next part is
// made inside this call). EAGAIN (nothing queued) sends the caller to the
// blocking receive, which waits with the runtime's bookkeeping.
func rawRecv(fd int, b []byte) (n, flags int, err error) {
	iov := unix.Iovec{Base: unsafe.SliceData(b)}
	iov.SetLen(len(b))
	msg := unix.Msghdr{Iov: &iov, Iovlen: 1}
	r, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT)
	if e != 0 {
		return 0, 0, e
	}
	return int(r), int(msg.Flags), nil
}

// appendMessage is m.MarshalBinary appended to b, without a buffer per
// message (a batch is ~60 of them).
func appendMessage(b []byte, m netlink.Message) ([]byte, error) {
	l := int(m.Header.Length)
	if l < unix.NLMSG_HDRLEN || l != align(l) || l < unix.NLMSG_HDRLEN+len(m.Data) {
		return nil, fmt.Errorf("netlink: message length %d for %d bytes of data", l, len(m.Data))
	}
	b = binary.NativeEndian.AppendUint32(b, m.Header.Length)
	b = binary.NativeEndian.AppendUint16(b, uint16(m.Header.Type))
	b = binary.NativeEndian.AppendUint16(b, uint16(m.Header.Flags))
	b = binary.NativeEndian.AppendUint32(b, m.Header.Sequence)
	b = binary.NativeEndian.AppendUint32(b, m.Header.PID)
	b = append(b, m.Data...)
	return append(b, make([]byte, l-unix.NLMSG_HDRLEN-len(m.Data))...), nil
}

func (s *Sock) Receive() ([]netlink.Message, error) {
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
func (s *Sock) ReceiveIter() iter.Seq2[netlink.Message, error] {
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

func (s *Sock) recv() ([]byte, error) {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	for {
		n, flags, err := s.recvmsg(*bp)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return nil, fmt.Errorf("recvmsg: no reply from the kernel within %s", ReplyTimeout)
		case err != nil:
			return nil, fmt.Errorf("recvmsg: %w", err)
		case flags&unix.MSG_TRUNC != 0:
			return nil, fmt.Errorf("recvmsg: reply larger than %d bytes", len(*bp))
		}
		return slices.Clone((*bp)[:n]), nil
	}
}

// recvmsg reads one datagram into b: an inline socket first without
// waiting (rawRecv), and any socket with nothing queued waits, with the
// runtime's bookkeeping, until the receive timeout.
func (s *Sock) recvmsg(b []byte) (n, flags int, err error) {
	if s.inline {
		if n, flags, err = rawRecv(s.fd, b); !errors.Is(err, unix.EAGAIN) {
			return n, flags, err
		}
		if waitingHook != nil {
			waitingHook()
		}
	}
	n, _, flags, _, err = unix.Recvmsg(s.fd, b, nil, 0)
	return n, flags, err
}

// waitingHook, set by a test only, runs when an inline socket found
// nothing queued and is about to wait.
var waitingHook func()

// Exchange is s as an nltest.Func, the transport google/nftables takes
// through WithTestDial: a request is sent and its replies are left for the
// next receive (req nil), which reads one datagram.
func (s *Sock) Exchange(req []netlink.Message) ([]netlink.Message, error) {
	if req != nil {
		return nil, s.SendMessages(req)
	}
	return s.Receive()
}
