package nlsock

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Conn numbers requests on a Sock and checks the kernel's replies: the
// part of mdlayher/netlink's Conn the batch, the GETs and the address add
// use, with the same names. netlink.NewConn seeds a math/rand source for
// its first sequence number (~10 µs and 5 KiB a socket, 6 % of a fresh
// Apply's time by perf); the runtime's generator does as well here.
// A Conn is for one goroutine at a time.
type Conn struct {
	s   *Sock
	seq uint32
}

// Conn is a Conn over s.
func (s *Sock) Conn() *Conn { return &Conn{s: s, seq: rand.Uint32()} }

func (c *Conn) Close() error { return c.s.Close() }

// SendMessages numbers msgs (sequence, and length where it is 0; port id
// 0, the kernel's business) and sends them in one datagram, as netlink.Conn does. It
// returns them as sent.
func (c *Conn) SendMessages(msgs []netlink.Message) ([]netlink.Message, error) {
	for i := range msgs {
		h := &msgs[i].Header
		if h.Length == 0 {
			h.Length = uint32(align(unix.NLMSG_HDRLEN + len(msgs[i].Data)))
		}
		c.seq++
		h.Sequence, h.PID = c.seq, 0
	}
	if err := c.s.SendMessages(msgs); err != nil {
		return nil, fmt.Errorf("netlink send: %w", err)
	}
	return msgs, nil
}

// Receive reads one reply, all of a multi-part one: an error the kernel
// reports (NLMSG_ERROR with a code) is returned as an error wrapping its
// errno; an ACK (code 0) is returned as a message.
func (c *Conn) Receive() ([]netlink.Message, error) {
	var out []netlink.Message
	for {
		more := false
		for m, err := range c.s.ReceiveIter() {
			if err != nil {
				return nil, fmt.Errorf("netlink receive: %w", err)
			}
			if err := replyError(m); err != nil {
				return nil, err
			}
			if m.Header.Type == netlink.Done && m.Header.Flags&netlink.Multi != 0 {
				return out, nil
			}
			more = more || m.Header.Flags&netlink.Multi != 0
			out = append(out, m)
		}
		if !more {
			return out, nil
		}
	}
}

// Execute sends m and returns its reply; a reply to another request
// (a sequence number not m's) is an error.
func (c *Conn) Execute(m netlink.Message) ([]netlink.Message, error) {
	sent, err := c.SendMessages([]netlink.Message{m})
	if err != nil {
		return nil, err
	}
	replies, err := c.Receive()
	if err != nil {
		return nil, err
	}
	for _, r := range replies {
		if r.Header.Sequence != sent[0].Header.Sequence {
			return nil, fmt.Errorf("netlink receive: reply %d to request %d", r.Header.Sequence, sent[0].Header.Sequence)
		}
	}
	return replies, nil
}

// replyError is the errno an NLMSG_ERROR (or a multi-part DONE) carries,
// nil for none or 0.
func replyError(m netlink.Message) error {
	isErr := m.Header.Type == netlink.Error
	isDone := m.Header.Type == netlink.Done && m.Header.Flags&netlink.Multi != 0
	if !isErr && !(isDone && len(m.Data) > 0) {
		return nil
	}
	if len(m.Data) < 4 {
		return fmt.Errorf("netlink receive: error message too short (%d bytes)", len(m.Data))
	}
	if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
		return fmt.Errorf("netlink receive: %w", unix.Errno(-code))
	}
	return nil
}

func align(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }
