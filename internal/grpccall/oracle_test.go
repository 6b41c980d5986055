package grpccall

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// oracle reads a server's side of one unary call with x/net/http2's Framer,
// which does the framing (sizes, padding, priority, CONTINUATION, HPACK,
// each frame type's own rules); only what a unary gRPC answer means on top
// of it is written here. It returns the response message, or why there is
// none. FuzzAnswerOracle holds the hand-written reader to it.
func oracle(answer []byte) ([]byte, error) {
	fr := http2.NewFramer(io.Discard, bytes.NewReader(answer))
	fr.SetMaxReadFrameSize(minMaxFrameSize)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = maxHeaderBytes
	o := oracleCall{sendConn: defaultWindow, sendStream: defaultWindow, peerInitial: defaultWindow}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, fmt.Errorf("framer: %w", err)
		}
		done, err := o.frame(f)
		if err != nil {
			return nil, err
		}
		if done {
			return o.message()
		}
	}
}

type oracleCall struct {
	gotHeaders                        bool
	data                              []byte
	sendConn, sendStream, peerInitial int64
}

// frame applies one frame; done is true once the stream ended well.
func (o *oracleCall) frame(f http2.Frame) (done bool, err error) {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return false, o.settings(f)
	case *http2.WindowUpdateFrame:
		return false, o.windowUpdate(f)
	case *http2.GoAwayFrame:
		if f.LastStreamID < streamID {
			return false, errors.New("GOAWAY before the call")
		}
	case *http2.RSTStreamFrame:
		if f.StreamID == streamID {
			return false, errors.New("RST_STREAM")
		}
	case *http2.PushPromiseFrame:
		return false, errors.New("PUSH_PROMISE")
	case *http2.MetaHeadersFrame:
		return o.headers(f)
	case *http2.DataFrame:
		return false, o.dataFrame(f)
	}
	return false, nil
}

func (o *oracleCall) settings(f *http2.SettingsFrame) error {
	return f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingEnablePush:
			if s.Val != 0 { // RFC 9113 §6.5.2, the client's side of the rule
				return errors.New("push enabled by a server")
			}
		case http2.SettingInitialWindowSize:
			if s.Val > maxWindow {
				return errors.New("initial window")
			}
			o.sendStream += int64(s.Val) - o.peerInitial
			o.peerInitial = int64(s.Val)
		case http2.SettingMaxFrameSize:
			if s.Val < minMaxFrameSize || s.Val > maxFrameSize {
				return errors.New("max frame size")
			}
		}
		return nil
	})
}

func (o *oracleCall) windowUpdate(f *http2.WindowUpdateFrame) error {
	switch f.StreamID {
	case 0:
		o.sendConn += int64(f.Increment)
		if o.sendConn > maxWindow {
			return errors.New("connection window overflow")
		}
	case streamID:
		o.sendStream += int64(f.Increment)
		if o.sendStream > maxWindow {
			return errors.New("stream window overflow")
		}
	}
	return nil
}

func (o *oracleCall) headers(f *http2.MetaHeadersFrame) (bool, error) {
	if f.StreamID != streamID || f.Truncated {
		return false, errors.New("header block on another stream, or over the limit")
	}
	if f.StreamEnded() {
		if !o.gotHeaders || f.PseudoValue("status") != "" && f.PseudoValue("status") != "200" {
			return false, errors.New("no answer headers before the trailers")
		}
		if st, ok := field(f, "grpc-status"); !ok || st != "0" {
			return false, errors.New("not OK")
		}
		return true, nil
	}
	if o.gotHeaders {
		return false, errors.New("a second header block")
	}
	o.gotHeaders = true
	ct, _ := field(f, "content-type")
	if f.PseudoValue("status") != "200" || ct != "application/grpc" && !strings.HasPrefix(ct, "application/grpc+") && !strings.HasPrefix(ct, "application/grpc;") {
		return false, errors.New("not a gRPC answer")
	}
	return false, nil
}

// field is the last value of a regular header field, as the client keeps.
func field(f *http2.MetaHeadersFrame, name string) (v string, ok bool) {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			v, ok = hf.Value, true
		}
	}
	return v, ok
}

func (o *oracleCall) dataFrame(f *http2.DataFrame) error {
	if f.StreamID != streamID || !o.gotHeaders || f.StreamEnded() {
		return errors.New("DATA out of place")
	}
	if len(o.data)+len(f.Data()) > 5+MaxResponseBytes {
		return errors.New("too large")
	}
	o.data = append(o.data, f.Data()...)
	return nil
}

func (o *oracleCall) message() ([]byte, error) {
	d := o.data
	if len(d) < 5 || d[0] != 0 || int64(binary.BigEndian.Uint32(d[1:5])) != int64(len(d)-5) {
		return nil, errors.New("not one uncompressed message")
	}
	return d[5:], nil
}

// FuzzAnswerOracle feeds the same server bytes to the client and to the
// Framer-based oracle: they must agree on whether the call succeeded and,
// when it did, on the message.
func FuzzAnswerOracle(f *testing.F) {
	for _, s := range answerSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		got, err := call(ctx, byteConn{bytes.NewReader(answer)}, "/sluice.v1.CNI/Add", []byte("req"), nil)
		want, werr := oracle(answer)
		switch {
		case err == nil && werr != nil:
			t.Fatalf("the client accepted %q as an answer; the oracle says %v", got, werr)
		case err != nil && werr == nil:
			t.Fatalf("the client refused an answer the oracle reads as %q: %v", want, err)
		case err == nil && !bytes.Equal(got, want):
			t.Fatalf("the client read %q, the oracle %q", got, want)
		}
	})
}

// The seeds agree: a test that fails if the oracle stops reading what the
// client reads, outside fuzzing too.
func TestOracleAgreesOnTheSeeds(t *testing.T) {
	for i, s := range answerSeeds() {
		got, err := call(context.Background(), byteConn{bytes.NewReader(s)}, "/sluice.v1.CNI/Add", []byte("req"), nil)
		want, werr := oracle(s)
		if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Errorf("seed %d: client %q, %v; oracle %q, %v", i, got, err, want, werr)
		}
	}
}
