package ztunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemesh/sluice/api/zds"
)

// conn is one ztunnel connection.
type conn struct {
	uc      *net.UnixConn
	log     *slog.Logger
	timeout time.Duration

	// turn is held by whoever is talking: one request and its ack at a
	// time, since an ack names no request.
	turn chan struct{}
	// done is closed when the connection is dropped.
	done     chan struct{}
	dropOnce sync.Once
	// synced is set once ztunnel has acked the snapshot.
	synced atomic.Bool
}

func newConn(uc *net.UnixConn, log *slog.Logger, timeout time.Duration) *conn {
	return &conn{uc: uc, log: log, timeout: timeout, turn: make(chan struct{}, 1), done: make(chan struct{})}
}

// drop closes the connection once; err, when set, says what went wrong.
func (c *conn) drop(why string, err error) {
	c.dropOnce.Do(func() {
		close(c.done)
		c.uc.Close()
		if err != nil {
			c.log.Warn("dropping ztunnel connection", "reason", why, "err", err)
		} else {
			c.log.Info("closing ztunnel connection", "reason", why)
		}
	})
}

func (c *conn) dropped() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// errClosed is a connection that dropped before a request was sent on it:
// as good as no ztunnel connected.
var errClosed = fmt.Errorf("ztunnel connection closed: %w", ErrNotConnected)

// acquire takes the turn, or fails when ctx ends or the connection drops.
func (c *conn) acquire(ctx context.Context) error {
	select {
	case c.turn <- struct{}{}:
	case <-c.done:
		return errClosed
	case <-ctx.Done():
		return fmt.Errorf("wait for ztunnel connection to be free: %w", ctx.Err())
	}
	// select picks at random among ready cases.
	if c.dropped() {
		c.release()
		return errClosed
	}
	return nil
}

func (c *conn) release() { <-c.turn }

// readHello reads ztunnel's first message and refuses any version but V1.
func (c *conn) readHello() error {
	var hello zds.ZdsHello
	if err := c.read(&hello); err != nil {
		return fmt.Errorf("read ztunnel hello: %w", err)
	}
	if v := hello.GetVersion(); v != zds.Version_V1 {
		return fmt.Errorf("ztunnel hello has ZDS version %v; only V1 is supported", v)
	}
	return nil
}

// exchange sends one packet, with fd attached when fd >= 0, and waits for
// its ack, returning ztunnel's error text ("" for success). The caller holds
// the turn. A failed write or a missing, late or garbled ack drops the
// connection: a late ack would otherwise be taken for the next request's.
func (c *conn) exchange(data []byte, fd int) (string, error) {
	var rights []byte
	if fd >= 0 {
		rights = unix.UnixRights(fd)
	}
	if err := c.uc.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		c.drop("set write deadline", err)
		return "", fmt.Errorf("set write deadline: %w", err)
	}
	_, _, err := c.uc.WriteMsgUnix(data, rights, nil)
	// A deadline left set outlives the exchange and fails whatever runs
	// on the connection after it expires.
	c.uc.SetWriteDeadline(time.Time{})
	if err != nil {
		// Nothing reached ztunnel: it died (or stopped reading) before the
		// server noticed. For the caller that is no ztunnel connected, which
		// an ADD waits out and the runtime retries, not an internal error.
		c.drop("write failed", err)
		return "", fmt.Errorf("write to ztunnel: %w: %w", ErrNotConnected, err)
	}
	var resp zds.WorkloadResponse
	if err := c.read(&resp); err != nil {
		c.drop("no ack", err)
		return "", fmt.Errorf("wait for ztunnel ack: %w", err)
	}
	ack := resp.GetAck()
	if ack == nil {
		err := errors.New("ztunnel answered without an ack")
		c.drop("protocol error", err)
		return "", err
	}
	return ack.GetError(), nil
}

// read reads one packet into m, within the timeout, and clears the
// deadline after: the connection then idles for hours, and an expired
// deadline would fail the keepalive's peek (and the next read) at once.
func (c *conn) read(m proto.Message) error {
	if err := c.uc.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return fmt.Errorf("set read deadline: %w", err)
	}
	defer c.uc.SetReadDeadline(time.Time{})
	// One byte more than ztunnel's limit, to see an oversized packet; the
	// kernel closes any fd ztunnel might attach, as there is no room for it.
	buf := make([]byte, maxPacket+1)
	n, _, flags, _, err := c.uc.ReadMsgUnix(buf, nil)
	switch {
	case err != nil:
		return err
	case n == 0:
		// On SOCK_SEQPACKET a zero-length read is the peer hanging up.
		return io.EOF
	case n > maxPacket || flags&unix.MSG_TRUNC != 0:
		return fmt.Errorf("packet longer than %d bytes", maxPacket)
	}
	if err := proto.Unmarshal(buf[:n], m); err != nil {
		return fmt.Errorf("decode %s: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	return nil
}

// watch checks the idle connection every interval until it is dropped.
// ztunnel only speaks when spoken to, so there is nothing to read: a
// hang-up, an error or an unasked-for packet ends the connection.
func (c *conn) watch(interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
		}
		select {
		case c.turn <- struct{}{}:
		default:
			continue // a request is in flight: its ack is the check
		}
		err := c.idleCheck()
		c.release()
		if err != nil {
			c.drop("keepalive", err)
			return
		}
	}
}

// idleCheck peeks at the socket without waiting. Control, not Read: a peek
// needs no poller, and Read would answer a deadline rather than the socket.
func (c *conn) idleCheck() error {
	raw, err := c.uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("keepalive: %w", err)
	}
	var n int
	var rerr error
	var b [1]byte
	err = raw.Control(func(fd uintptr) {
		n, _, rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	})
	switch {
	case err != nil:
		return fmt.Errorf("keepalive: %w", err)
	case errors.Is(rerr, unix.EAGAIN):
		return nil
	case rerr != nil:
		return fmt.Errorf("keepalive: %w", rerr)
	case n == 0:
		return io.EOF
	default:
		return errors.New("ztunnel sent a packet nobody asked for")
	}
}
