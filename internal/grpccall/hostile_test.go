package grpccall

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// Hostile and odd servers: scripted bytes on the server's side of the
// connection. Every answer that is not a well-formed gRPC OK must be an
// error, never a response.

// script builds a server's side of a connection frame by frame.
type script struct {
	b   []byte
	hb  bytes.Buffer
	enc *hpack.Encoder
}

func newScript() *script {
	s := &script{}
	s.enc = hpack.NewEncoder(&s.hb)
	return s.frame(frameSettings, 0, 0, appendSetting(nil, settingMaxFrameSize, 1<<20))
}

func (s *script) frame(typ, flags uint8, stream uint32, payload []byte) *script {
	s.b = appendFrame(s.b, typ, flags, stream, payload)
	return s
}

// block HPACK-encodes alternating names and values.
func (s *script) block(kv ...string) []byte {
	s.hb.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = s.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return bytes.Clone(s.hb.Bytes())
}

func (s *script) headers(flags uint8, kv ...string) *script {
	return s.frame(frameHeaders, flags|flagEndHeaders, streamID, s.block(kv...))
}

func (s *script) ok() *script {
	return s.headers(0, ":status", "200", "content-type", "application/grpc")
}

func (s *script) msg(flags uint8, p []byte) *script {
	return s.frame(frameData, flags, streamID, grpcMessage(p))
}

func (s *script) trailers(kv ...string) *script { return s.headers(flagEndStream, kv...) }

func grpcMessage(p []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(p))), p...)
}

// serveScript answers every connection with the script's bytes, reading
// (and keeping) what the client sends, and then closes.
func serveScript(t *testing.T, answer []byte) (string, chan []byte) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	got := make(chan []byte, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		done := make(chan []byte)
		go func() { b, _ := io.ReadAll(c); done <- b }()
		_, _ = c.Write(answer)
		// A half close: the client reads all of the answer, then EOF, and
		// can still write (its SETTINGS ACK, PING answers).
		c.(*net.UnixConn).CloseWrite()
		got <- <-done
	}()
	return sock, got
}

func TestScriptedAnswers(t *testing.T) {
	cases := []struct {
		name    string
		answer  *script
		code    codes.Code
		msgPart string
	}{
		{"ok", newScript().ok().msg(0, []byte("answer")).trailers("grpc-status", "0"), codes.OK, ""},
		{"ok, headers in CONTINUATIONs, padded and prioritised", continued(), codes.OK, ""},
		{"trailers only", newScript().trailers(":status", "200", "content-type", "application/grpc", "grpc-status", "7", "grpc-message", "no%20way"),
			codes.PermissionDenied, "no way"},
		{"no grpc-status", newScript().ok().msg(0, nil).trailers("x", "y"), codes.Internal, "without grpc-status"},
		{"malformed grpc-status", newScript().ok().msg(0, nil).trailers("grpc-status", "zero"), codes.Internal, "malformed grpc-status"},
		{"HTTP 503", newScript().trailers(":status", "503"), codes.Unavailable, "503"},
		{"HTTP 503 headers", newScript().headers(0, ":status", "503"), codes.Unavailable, "503"},
		{"not gRPC", newScript().headers(0, ":status", "200", "content-type", "text/html"), codes.Internal, "text/html"},
		{"compressed", newScript().ok().frame(frameData, 0, streamID, append([]byte{1, 0, 0, 0, 1}, 'x')).trailers("grpc-status", "0"), codes.Internal, "compressed"},
		{"two messages", newScript().ok().msg(0, []byte("a")).msg(0, []byte("b")).trailers("grpc-status", "0"), codes.Internal, "more than one"},
		{"no message", newScript().ok().trailers("grpc-status", "0"), codes.Internal, "no response message"},
		{"short message", newScript().ok().frame(frameData, 0, streamID, []byte{0, 0, 0, 0, 9, 'x'}).trailers("grpc-status", "0"), codes.Internal, "9 bytes"},
		{"data ends the stream", newScript().ok().msg(flagEndStream, []byte("a")), codes.Internal, "without trailers"},
		{"data before headers", newScript().msg(0, []byte("a")), codes.Internal, "before the response headers"},
		{"frame over 16 KiB", newScript().ok().frame(frameData, 0, streamID, make([]byte, 20<<10)), codes.Internal, "over the"},
		{"bad HPACK", newScript().frame(frameHeaders, flagEndHeaders, streamID, []byte{0xff, 0xff, 0xff, 0xff}), codes.Internal, "HPACK"},
		{"HPACK bomb: a small block, a huge header list", bomb(), codes.Internal, "header list"},
		{"push", newScript().frame(framePushPromise, flagEndHeaders, streamID, []byte{0, 0, 0, 2}), codes.Internal, "PUSH_PROMISE"},
		{"goaway before the call", newScript().frame(frameGoAway, 0, 0, make([]byte, 8)), codes.Unavailable, "going away"},
		{"refused", newScript().frame(frameRSTStream, 0, streamID, []byte{0, 0, 0, 7}), codes.Unavailable, "RST_STREAM"},
		{"reset", newScript().ok().frame(frameRSTStream, 0, streamID, []byte{0, 0, 0, 2}), codes.Internal, "RST_STREAM"},
		{"closed after headers", newScript().ok(), codes.Unavailable, "EOF"},
		{"second headers without end", newScript().ok().ok(), codes.Internal, "second header block"},
		{"settings of odd length", newScript().frame(frameSettings, 0, 0, []byte{1, 2, 3}), codes.Internal, "SETTINGS"},
		{"window overflow", newScript().frame(frameWindowUpdate, 0, 0, []byte{0x7f, 0xff, 0xff, 0xff}), codes.Internal, "overflowed"},
		{"headers on stream 3", newScript().frame(frameHeaders, flagEndHeaders, 3, nil), codes.Internal, "stream 3"},
		{"continuation alone", newScript().frame(frameContinuation, flagEndHeaders, streamID, nil), codes.Internal, "CONTINUATION"},
		{"frame inside a header block", newScript().frame(frameHeaders, 0, streamID, nil).frame(framePing, 0, 0, make([]byte, 8)), codes.Internal, "inside a header block"},
		{"too long a header block", longBlock(), codes.Internal, "header block over"},
		{"answer over the limit", overLimit(), codes.ResourceExhausted, "limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sock, _ := serveScript(t, c.answer.b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := Call(ctx, sock, "/sluice.v1.CNI/Add", []byte("req"))
			if c.code == codes.OK {
				if err != nil || string(resp) != "answer" {
					t.Fatalf("got %q, %v; want the answer", resp, err)
				}
				return
			}
			if resp != nil {
				t.Fatalf("a response from a broken answer: %q", resp)
			}
			wantCode(t, err, c.code, c.msgPart)
		})
	}
}

// continued is an OK answer whose response headers come in a padded,
// prioritised HEADERS frame and a CONTINUATION, with a PING and a PRIORITY
// and an unknown frame type before them.
func continued() *script {
	s := newScript().frame(framePing, 0, 0, []byte("12345678")).frame(0x2, 0, streamID, make([]byte, 5)).frame(0xfa, 0, 0, []byte("?"))
	block := s.block(":status", "200", "content-type", "application/grpc+proto")
	first := append([]byte{3}, make([]byte, 5)...) // pad length 3, priority fields
	first = append(append(first, block[:2]...), 0, 0, 0)
	s.frame(frameHeaders, flagPadded|flagPriority, streamID, first).frame(frameContinuation, flagEndHeaders, streamID, block[2:])
	return s.msg(0, []byte("answer")).trailers("grpc-status", "0")
}

// bomb indexes a 3 KiB value once and refers to it six times: a small
// block that decodes to 18 KiB.
func bomb() *script {
	s := newScript()
	v := strings.Repeat("b", 3<<10)
	return s.headers(0, ":status", "200", "x", v, "x", v, "x", v, "x", v, "x", v, "x", v)
}

func longBlock() *script {
	s := newScript().frame(frameHeaders, 0, streamID, make([]byte, 10<<10))
	return s.frame(frameContinuation, 0, streamID, make([]byte, 10<<10))
}

func overLimit() *script {
	s := newScript().ok()
	s.frame(frameData, 0, streamID, append([]byte{0}, binary.BigEndian.AppendUint32(nil, MaxResponseBytes+1)...))
	chunk := make([]byte, 16<<10)
	for range MaxResponseBytes/len(chunk) + 1 {
		s.frame(frameData, 0, streamID, chunk)
	}
	return s
}

// The client answers the server's SETTINGS and PINGs, announces its own
// limits, and writes the call the gRPC spec's way.
func TestWhatTheClientSends(t *testing.T) {
	sock, got := serveScript(t, newScript().frame(framePing, 0, 0, []byte("pingpong")).ok().msg(0, []byte("answer")).trailers("grpc-status", "0").b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Call(ctx, sock, "/sluice.v1.CNI/Add", []byte("req")); err != nil {
		t.Fatal(err)
	}
	sent := <-got
	if !bytes.HasPrefix(sent, []byte(clientPreface)) {
		t.Fatalf("no client preface: %q", sent)
	}
	fr := frameReader{r: bufioOf(sent[len(clientPreface):])}
	var types []uint8
	fields := map[string]string{}
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) { fields[f.Name] = f.Value })
	var data []byte
	for {
		f, err := fr.next()
		if err != nil {
			break
		}
		types = append(types, f.typ)
		switch {
		case f.typ == frameHeaders:
			_, _ = dec.Write(f.payload)
		case f.typ == frameData:
			data = append(data, f.payload...)
		case f.typ == framePing && (f.flags&flagAck == 0 || string(f.payload) != "pingpong"):
			t.Errorf("PING answered wrongly: flags %x, %q", f.flags, f.payload)
		}
	}
	if !bytes.Equal(data, grpcMessage([]byte("req"))) {
		t.Errorf("DATA %q", data)
	}
	for k, v := range map[string]string{":method": "POST", ":path": "/sluice.v1.CNI/Add", "content-type": "application/grpc", "te": "trailers"} {
		if fields[k] != v {
			t.Errorf("header %s = %q, want %q", k, fields[k], v)
		}
	}
	if !strings.HasSuffix(fields["grpc-timeout"], "m") {
		t.Errorf("grpc-timeout %q", fields["grpc-timeout"])
	}
	want := []uint8{frameSettings, frameWindowUpdate, frameHeaders, frameData, frameSettings, framePing}
	if !bytes.Equal(types, want) {
		t.Errorf("frames %v, want %v (settings, window, headers, data, settings ack, ping ack)", types, want)
	}
}

func TestEncodeTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Nanosecond:              "1m",
		1500 * time.Microsecond:      "2m",
		5 * time.Second:              "5000m",
		99999999 * time.Millisecond:  "99999999m",
		100000000 * time.Millisecond: "100000S",
		1 << 62:                      "76861434M",
	} {
		if got := encodeTimeout(d); got != want {
			t.Errorf("encodeTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}
