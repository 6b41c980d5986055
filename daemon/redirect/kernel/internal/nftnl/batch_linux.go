package nftnl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/internal/nlsock"
)

// google/nftables (v0.3.0) asks for an ACK and, for rules and sets, an
// ECHO copy of every message in a batch, and reads them back one by one:
// for a pod's table that is ~60 replies the kernel builds and ~60 recvmsg
// calls, a third of Apply's time. nft itself asks for neither; upstream
// stopped asking after v0.3.0. So the batch is marshalled by google/nftables
// (every byte of it: its own WithTestDial option hands the finished batch to
// a function instead of a socket) and sent here with one ACK, on the last
// message. The kernel reports every failing message whatever its flags, and
// delivers those errors before that ACK, so a batch has failed exactly when
// an error arrives before it.

// marshal runs build against a google/nftables Conn that sends nowhere
// and returns the batch Flush would have sent, BATCH_BEGIN to BATCH_END.
func marshal(build func(*nftables.Conn) error) ([]netlink.Message, error) {
	var batch []netlink.Message
	capture := func(req []netlink.Message) ([]netlink.Message, error) {
		if req == nil {
			// Flush reads one reply per message: a plain ACK.
			return []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4)}}, nil
		}
		if batch != nil {
			return nil, fmt.Errorf("marshal: a second send")
		}
		batch = make([]netlink.Message, len(req))
		copy(batch, req)
		return nil, nil
	}
	c, err := nftables.New(nftables.WithTestDial(capture))
	if err != nil {
		return nil, err
	}
	if err := build(c); err != nil {
		return nil, err
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("marshal batch: %w", err)
	}
	return batch, nil
}

// socket is one NETLINK_NETFILTER socket opened in a netns.
type socket struct{ nl *nlsock.Conn }

func (s *socket) Close() error { return s.nl.Close() }

// open makes a socket bound to ns (nlsock).
func open(ns netns.NsHandle) (*socket, error) {
	s, err := nlsock.Open(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, err
	}
	return &socket{nl: s[0].Conn()}, nil
}

// send commits batch (from marshal) as one transaction and waits for its
// one ACK. It returns the netns's nftables generation the commit made,
// from the NEWGEN message the kernel sends the committer when the batch's
// first message asks for an echo (nf_tables_gen_notify looks at the first
// header after BATCH_BEGIN, which nfnetlink has pulled off by then); that
// message's own echo comes along, one small reply. 0 if none came. After
// an error the socket may still hold the rest of the batch's replies: use
// a fresh socket for the next batch.
func (s *socket) send(batch []netlink.Message) (gen uint32, err error) {
	return s.sendBatch(batch, true)
}

// sendQuiet is send for a batch whose generation nobody needs: it asks
// for no echo. An echo on a DELTABLE is a notification for every rule,
// chain and set the table held, each marshalled by the kernel and read
// here: twice the CPU of the delete itself.
func (s *socket) sendQuiet(batch []netlink.Message) error {
	_, err := s.sendBatch(batch, false)
	return err
}

func (s *socket) sendBatch(batch []netlink.Message, echo bool) (gen uint32, err error) {
	if len(batch) <= 2 {
		return 0, nil // BATCH_BEGIN and BATCH_END only: nothing to do
	}
	prepare(batch, echo)
	sent, err := s.nl.SendMessages(batch)
	if err != nil {
		return 0, err
	}
	last := sent[len(sent)-2].Header.Sequence
	for {
		// An error for any message of the batch (or for the commit)
		// comes back as an error here.
		replies, err := s.nl.Receive()
		if err != nil {
			return 0, err
		}
		for _, m := range replies {
			switch {
			case m.Header.Type == newGenType:
				gen = genID(m.Data)
			case m.Header.Type == netlink.Error && m.Header.Sequence == last:
				return gen, nil
			}
		}
	}
}

// prepare asks for one ACK, for the batch's last message, and an echo of
// its first when echo is set; the socket numbers the messages.
func prepare(batch []netlink.Message, echo bool) {
	for i := range batch {
		h := &batch[i].Header
		h.Flags &^= netlink.Acknowledge | unix.NLM_F_ECHO
		h.Sequence, h.PID = 0, 0
	}
	if echo {
		batch[1].Header.Flags |= unix.NLM_F_ECHO
	}
	batch[len(batch)-2].Header.Flags |= netlink.Acknowledge
}

// newGenType is nf_tables' NEWGEN message: the generation a commit made.
const newGenType = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWGEN)

// genID reads NFTA_GEN_ID from a NEWGEN message's body (nfgenmsg, then
// attributes); 0 when it has none.
func genID(data []byte) uint32 {
	if len(data) < 4 {
		return 0
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return 0
	}
	ad.ByteOrder = binary.BigEndian
	var id uint32
	for ad.Next() {
		if ad.Type() == unix.NFTA_GEN_ID {
			id = ad.Uint32()
		}
	}
	if ad.Err() != nil {
		return 0
	}
	return id
}

// generation asks the kernel for the netns's nftables generation: one GET.
func (s *socket) generation() (uint32, error) {
	replies, err := s.nl.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN),
			Flags: netlink.Request,
		},
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	})
	if err != nil {
		return 0, fmt.Errorf("get generation: %w", err)
	}
	for _, m := range replies {
		if m.Header.Type == newGenType {
			if id := genID(m.Data); id != 0 {
				return id, nil
			}
		}
	}
	return 0, fmt.Errorf("get generation: no generation in the kernel's reply")
}

// tableExists asks the kernel for table inet name: one GET, no commit,
// and no ACK asked (the table or an error comes back either way).
func (s *socket) tableExists(name string) (bool, error) {
	attrs, err := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_TABLE_NAME, Data: append([]byte(name), 0)}})
	if err != nil {
		return false, err
	}
	_, err = s.nl.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETTABLE),
			Flags: netlink.Request,
		},
		// nfgenmsg: family, version, resource id (big endian, 0).
		Data: append([]byte{unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0}, attrs...),
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("get table: %w", err)
}
