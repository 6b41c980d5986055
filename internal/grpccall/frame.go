package grpccall

import (
	"bufio"
	"encoding/binary"
	"io"
)

// HTTP/2 frame types and flags (RFC 9113 §6) this client reads or writes.
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagAck        = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	settingHeaderTableSize   = 0x1
	settingEnablePush        = 0x2
	settingInitialWindowSize = 0x4
	settingMaxFrameSize      = 0x5
	settingMaxHeaderListSize = 0x6

	frameHeaderLen = 9
	// minMaxFrameSize is every peer's frame size limit until it says
	// otherwise; this client never raises its own.
	minMaxFrameSize = 16384
	maxFrameSize    = 1<<24 - 1
	maxWindow       = 1<<31 - 1
	defaultWindow   = 65535
)

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frame is one frame read; payload is valid until the next read.
type frame struct {
	typ, flags uint8
	stream     uint32
	payload    []byte
}

// frameReader reads frames no larger than this client's SETTINGS allow.
type frameReader struct {
	r   *bufio.Reader
	buf [minMaxFrameSize]byte
	hdr [frameHeaderLen]byte
}

func (fr *frameReader) next() (frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return frame{}, err
	}
	n := int(fr.hdr[0])<<16 | int(fr.hdr[1])<<8 | int(fr.hdr[2])
	if n > len(fr.buf) {
		return frame{}, protocolError("a frame of %d bytes, over the %d this client allows", n, len(fr.buf))
	}
	f := frame{typ: fr.hdr[3], flags: fr.hdr[4], stream: binary.BigEndian.Uint32(fr.hdr[5:]) & maxWindow, payload: fr.buf[:n]}
	if _, err := io.ReadFull(fr.r, f.payload); err != nil {
		return frame{}, err
	}
	return f, nil
}

// unpad strips a PADDED frame's pad length byte and padding, and a HEADERS
// frame's priority fields.
func (f frame) unpad() ([]byte, error) {
	p := f.payload
	pad := 0
	if f.flags&flagPadded != 0 {
		if len(p) < 1 {
			return nil, protocolError("a padded frame with no pad length")
		}
		pad, p = int(p[0]), p[1:]
	}
	if f.typ == frameHeaders && f.flags&flagPriority != 0 {
		if len(p) < 5 {
			return nil, protocolError("a HEADERS frame too short for its priority")
		}
		p = p[5:]
	}
	if pad > len(p) {
		return nil, protocolError("padding longer than the frame")
	}
	return p[:len(p)-pad], nil
}

// appendFrame appends a frame header and payload.
func appendFrame(b []byte, typ, flags uint8, stream uint32, payload []byte) []byte {
	n := len(payload)
	b = append(b, byte(n>>16), byte(n>>8), byte(n), typ, flags)
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}

func appendSetting(b []byte, id uint16, v uint32) []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint16(b, id), v)
}
