package grpccall

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"testing"
	"time"
)

func bufioOf(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// byteConn is a connection whose server side is fixed bytes; writes vanish.
type byteConn struct{ r *bytes.Reader }

func (c byteConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c byteConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c byteConn) Close() error                     { return nil }
func (c byteConn) LocalAddr() net.Addr              { return nil }
func (c byteConn) RemoteAddr() net.Addr             { return nil }
func (c byteConn) SetDeadline(time.Time) error      { return nil }
func (c byteConn) SetReadDeadline(time.Time) error  { return nil }
func (c byteConn) SetWriteDeadline(time.Time) error { return nil }

// answerSeeds are the scripted answers both fuzz targets start from.
func answerSeeds() [][]byte {
	var out [][]byte
	for _, s := range []*script{
		newScript().ok().msg(0, []byte("answer")).trailers("grpc-status", "0"),
		continued(),
		newScript().trailers(":status", "200", "grpc-status", "3", "grpc-message", "bad%0Aip"),
		newScript().ok().msg(flagEndStream, []byte("a")),
		newScript().frame(frameGoAway, 0, 0, make([]byte, 8)),
		newScript().frame(frameWindowUpdate, 0, streamID, []byte{0, 0, 1, 0}).ok().msg(0, nil).trailers("grpc-status", "0"),
		newScript().frame(frameSettings, 0, 0, appendSetting(nil, settingMaxFrameSize, 1<<20)).ok().msg(0, []byte("b")).trailers("grpc-status", "0"),
		newScript().frame(framePing, 0, 0, make([]byte, 8)).ok().msg(flagPadded, []byte("c")).trailers("grpc-status", "0"),
		newScript().headers(0, ":status", "200", "content-type", "application/grpc", "X-Upper", "1").msg(0, []byte("d")).trailers("grpc-status", "0"),
		newScript().headers(0, "content-type", "application/grpc", ":status", "200").msg(0, []byte("e")).trailers("grpc-status", "0"),
		newScript().ok().msg(0, []byte("f")).trailers("grpc-status", "0", ":path", "/x"),
	} {
		out = append(out, s.b)
	}
	return out
}

// FuzzAnswer feeds arbitrary bytes as the server's side of the call: the
// client must return (every input ends, at EOF at the latest), never panic,
// and never hand back more than its limit. Seeds: the scripted answers.
func FuzzAnswer(f *testing.F) {
	for _, s := range answerSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := call(ctx, byteConn{bytes.NewReader(answer)}, "/sluice.v1.CNI/Add", []byte("req"), nil)
		if err == nil && len(resp) > MaxResponseBytes {
			t.Fatalf("a %d-byte answer", len(resp))
		}
		if err != nil && resp != nil {
			t.Fatal("an error with a response")
		}
		if _, ok := err.(*Status); err != nil && !ok {
			t.Fatalf("error %T, want *Status", err)
		}
	})
}
