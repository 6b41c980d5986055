package grpccall

import (
	"bufio"
	"context"
	"encoding/binary"
	"net"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// streamID is the call's stream: the first a client opens.
const streamID = 1

// recvWindow is what this client lets the server send on the stream and
// the connection: a whole answer, so it never sends a WINDOW_UPDATE.
const recvWindow = MaxResponseBytes + 5 + 1<<10

// stream is one unary call on a fresh connection.
type stream struct {
	conn   net.Conn
	method string
	md     []Header
	ctx    context.Context
	fr     frameReader
	dec    *hpack.Decoder
	out    []byte // frames written at the next flush

	// Sending: the request message not yet written, and the windows.
	pending          []byte
	sendConn         int64
	sendStream       int64
	peerInitial      int64
	peerMaxFrameSize int

	// Receiving.
	gotHeaders bool    // response headers seen
	headerBuf  []byte  // a header block spread over CONTINUATION frames
	headerEnd  bool    // that block ends the stream
	data       []byte  // DATA payloads of the stream, in order
	result     *Status // how the stream ended; nil until it has
}

func newStream(ctx context.Context, conn net.Conn, method string, md []Header) *stream {
	s := &stream{conn: conn, method: method, md: md, ctx: ctx, sendConn: defaultWindow, sendStream: defaultWindow,
		peerInitial: defaultWindow, peerMaxFrameSize: minMaxFrameSize}
	s.fr.r = bufio.NewReaderSize(conn, 4<<10)
	s.dec = hpack.NewDecoder(4096, nil)
	s.dec.SetMaxStringLength(maxHeaderBytes)
	return s
}

// run sends the request and reads until the stream ends.
func (s *stream) run(req []byte) ([]byte, error) {
	hdrs, err := requestHeaders(s.ctx, s.method, s.md)
	if err != nil {
		return nil, err
	}
	s.out = append(s.out, clientPreface...)
	var settings []byte
	settings = appendSetting(settings, settingEnablePush, 0)
	settings = appendSetting(settings, settingInitialWindowSize, recvWindow)
	settings = appendSetting(settings, settingMaxHeaderListSize, maxHeaderBytes)
	s.out = appendFrame(s.out, frameSettings, 0, 0, settings)
	s.out = appendFrame(s.out, frameWindowUpdate, 0, 0, binary.BigEndian.AppendUint32(nil, recvWindow-defaultWindow))
	if len(hdrs) > minMaxFrameSize {
		return nil, newStatus(codes.Internal, "request headers of %d bytes do not fit one frame", len(hdrs))
	}
	s.out = appendFrame(s.out, frameHeaders, flagEndHeaders, streamID, hdrs)
	s.pending = binary.BigEndian.AppendUint32([]byte{0}, uint32(len(req)))
	s.pending = append(s.pending, req...)

	for s.result == nil {
		s.sendWhatFits()
		if err := s.flush(); err != nil {
			return nil, err
		}
		f, err := s.fr.next()
		if err != nil {
			if st, ok := err.(*Status); ok {
				return nil, st
			}
			return nil, connError(err)
		}
		if err := s.handle(f); err != nil {
			return nil, err
		}
	}
	if s.result.Code != codes.OK {
		return nil, s.result
	}
	return s.message()
}

// sendWhatFits queues as much of the request as the windows allow; the
// last DATA frame ends the client's half of the stream.
func (s *stream) sendWhatFits() {
	for len(s.pending) > 0 {
		n := int64(len(s.pending))
		n = min(n, s.sendConn, s.sendStream, int64(s.peerMaxFrameSize))
		if n <= 0 {
			return
		}
		flags := uint8(0)
		if n == int64(len(s.pending)) {
			flags = flagEndStream
		}
		s.out = appendFrame(s.out, frameData, flags, streamID, s.pending[:n])
		s.pending = s.pending[n:]
		s.sendConn -= n
		s.sendStream -= n
	}
}

func (s *stream) flush() error {
	if len(s.out) == 0 {
		return nil
	}
	_, err := s.conn.Write(s.out)
	s.out = s.out[:0]
	if err != nil {
		return connError(err)
	}
	return nil
}

// message is the answer's one length-prefixed message.
func (s *stream) message() ([]byte, error) {
	d := s.data
	if len(d) < 5 {
		if len(d) == 0 {
			return nil, protocolError("no response message for a unary call")
		}
		return nil, protocolError("a truncated message prefix")
	}
	if d[0] != 0 {
		return nil, protocolError("a compressed message, though this client accepts no compression")
	}
	n := binary.BigEndian.Uint32(d[1:5])
	if int64(n) > int64(len(d)-5) {
		return nil, protocolError("a message of %d bytes with %d sent", n, len(d)-5)
	}
	if int64(n) < int64(len(d)-5) {
		return nil, protocolError("more than one response message for a unary call")
	}
	return d[5:], nil
}
