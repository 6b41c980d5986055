package grpccall

import (
	"encoding/binary"
	"time"

	"google.golang.org/grpc/codes"
)

// handle applies one frame to the call.
func (s *stream) handle(f frame) error {
	if s.headerBuf != nil && f.typ != frameContinuation {
		return protocolError("frame type %d inside a header block", f.typ)
	}
	switch f.typ {
	case frameSettings:
		return s.settings(f)
	case framePing:
		if f.stream != 0 || len(f.payload) != 8 {
			return protocolError("a malformed PING")
		}
		if f.flags&flagAck == 0 {
			s.out = appendFrame(s.out, framePing, flagAck, 0, f.payload)
		}
	case frameWindowUpdate:
		return s.windowUpdate(f)
	case frameGoAway:
		return s.goAway(f)
	case frameRSTStream:
		return s.reset(f)
	case frameHeaders, frameContinuation:
		return s.headers(f)
	case frameData:
		return s.dataFrame(f)
	case framePushPromise:
		return protocolError("PUSH_PROMISE, though this client disabled push")
	case framePriority:
		// Ignored, but held to its shape (RFC 9113 §6.3).
		if f.stream == 0 || len(f.payload) != 5 {
			return protocolError("a malformed PRIORITY")
		}
	}
	// Unknown frame types are ignored (RFC 9113 §4.1, §5.5).
	return nil
}

func (s *stream) settings(f frame) error {
	if f.stream != 0 || len(f.payload)%6 != 0 {
		return protocolError("a malformed SETTINGS frame")
	}
	if f.flags&flagAck != 0 {
		if len(f.payload) != 0 {
			return protocolError("a SETTINGS ack with a payload") // RFC 9113 §6.5
		}
		return nil
	}
	for p := f.payload; len(p) > 0; p = p[6:] {
		id, v := binary.BigEndian.Uint16(p), int64(binary.BigEndian.Uint32(p[2:]))
		switch id {
		case settingEnablePush:
			if v != 0 { // RFC 9113 §6.5.2: a server may only say 0
				return protocolError("SETTINGS_ENABLE_PUSH %d from a server", v)
			}
		case settingInitialWindowSize:
			if v > maxWindow {
				return protocolError("SETTINGS_INITIAL_WINDOW_SIZE %d", v)
			}
			s.sendStream += v - s.peerInitial
			s.peerInitial = v
		case settingMaxFrameSize:
			if v < minMaxFrameSize || v > maxFrameSize {
				return protocolError("SETTINGS_MAX_FRAME_SIZE %d", v)
			}
			s.peerMaxFrameSize = int(v)
		}
	}
	s.out = appendFrame(s.out, frameSettings, flagAck, 0, nil)
	return nil
}

func (s *stream) windowUpdate(f frame) error {
	if len(f.payload) != 4 {
		return protocolError("a malformed WINDOW_UPDATE")
	}
	inc := int64(binary.BigEndian.Uint32(f.payload) & maxWindow)
	if inc == 0 {
		return protocolError("a WINDOW_UPDATE of 0")
	}
	switch f.stream {
	case 0:
		s.sendConn += inc
		if s.sendConn > maxWindow {
			return protocolError("the connection's send window overflowed")
		}
	case streamID:
		s.sendStream += inc
		if s.sendStream > maxWindow {
			return protocolError("the stream's send window overflowed")
		}
	}
	return nil
}

// goAway: a server going away before it took the call (last stream 0)
// never ran it, and a retry is safe; one that took it still answers.
func (s *stream) goAway(f frame) error {
	if f.stream != 0 || len(f.payload) < 8 {
		return protocolError("a malformed GOAWAY")
	}
	if last := binary.BigEndian.Uint32(f.payload) & maxWindow; last < streamID {
		return newStatus(codes.Unavailable, "the server is going away (GOAWAY, code %d) and did not take the call",
			binary.BigEndian.Uint32(f.payload[4:]))
	}
	return nil
}

// reset maps RST_STREAM codes as grpc-go's client does.
func (s *stream) reset(f frame) error {
	if f.stream == 0 || len(f.payload) != 4 {
		return protocolError("a malformed RST_STREAM") // RFC 9113 §6.4
	}
	if f.stream != streamID {
		return nil
	}
	c := binary.BigEndian.Uint32(f.payload)
	code := codes.Internal
	switch c {
	case 0x3, 0xb: // FLOW_CONTROL_ERROR, ENHANCE_YOUR_CALM
		code = codes.ResourceExhausted
	case 0x7: // REFUSED_STREAM: the server never ran the call
		code = codes.Unavailable
	case 0x8:
		// grpc-go's server cancels a stream whose grpc-timeout passed; as
		// grpc-go's client, call that the deadline once ours has passed too.
		code = codes.Canceled
		if dl, ok := s.ctx.Deadline(); ok && !dl.After(time.Now()) {
			return newStatus(codes.DeadlineExceeded, "context deadline exceeded")
		}
	case 0xc:
		code = codes.PermissionDenied
	}
	return newStatus(code, "stream terminated by RST_STREAM with error code %d", c)
}

// headers collects a header block (HEADERS plus CONTINUATIONs) and reads it
// once it is complete.
func (s *stream) headers(f frame) error {
	if f.stream != streamID {
		return protocolError("a header block on stream %d", f.stream)
	}
	frag := f.payload
	if f.typ == frameHeaders {
		var err error
		if frag, err = f.unpad(); err != nil {
			return err
		}
		s.headerEnd = f.flags&flagEndStream != 0
		s.headerBuf = []byte{}
	} else if s.headerBuf == nil {
		return protocolError("CONTINUATION without HEADERS")
	}
	if len(s.headerBuf)+len(frag) > maxHeaderBytes {
		return protocolError("a header block over %d bytes", maxHeaderBytes)
	}
	s.headerBuf = append(s.headerBuf, frag...)
	if f.flags&flagEndHeaders == 0 {
		return nil
	}
	block := s.headerBuf
	s.headerBuf = nil
	h, err := decodeHeaders(s.dec, block)
	if err != nil {
		return err
	}
	return s.headerBlock(h)
}

func (s *stream) headerBlock(h headerBlock) error {
	switch {
	case s.headerEnd:
		// Trailers, or a trailers-only answer.
		s.result = h.status()
		return nil
	case s.gotHeaders:
		return protocolError("a second header block that does not end the stream")
	}
	s.gotHeaders = true
	if st := h.check(); st != nil {
		return st
	}
	return nil
}

func (s *stream) dataFrame(f frame) error {
	if f.stream != streamID {
		return protocolError("DATA on stream %d", f.stream)
	}
	if !s.gotHeaders {
		return protocolError("DATA before the response headers")
	}
	p, err := f.unpad()
	if err != nil {
		return err
	}
	if len(s.data)+len(p) > 5+MaxResponseBytes {
		return newStatus(codes.ResourceExhausted, "the answer is larger than this client's limit of %d bytes", MaxResponseBytes)
	}
	s.data = append(s.data, p...)
	if f.flags&flagEndStream != 0 {
		return protocolError("the stream ended without trailers")
	}
	return nil
}
