package grpccall

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// Interop: this client against grpc-go's server, configured with the
// transport bounds the agent's server uses (daemon/rpc.NewServer: 64 KiB
// stream window, 1 MiB connection window, 1 MiB messages, 4 KiB buffers).
// The plugin's own tests run it against rpc.NewServer itself.

type testCNI struct {
	sluicev1.UnimplementedCNIServer
	add func(context.Context, *sluicev1.AddRequest) (*sluicev1.AddResponse, error)
}

func (c *testCNI) Add(ctx context.Context, r *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
	return c.add(ctx, r)
}

func serveGRPC(t *testing.T, add func(context.Context, *sluicev1.AddRequest) (*sluicev1.AddResponse, error)) (string, *grpc.Server) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(1<<20), grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(1<<20),
		grpc.MaxHeaderListSize(64<<10), grpc.ReadBufferSize(4<<10), grpc.WriteBufferSize(4<<10))
	sluicev1.RegisterCNIServer(gs, &testCNI{add: add})
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return sock, gs
}

// callAdd marshals req, calls Add and unmarshals the answer.
func callAdd(ctx context.Context, sock string, req *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	out, err := Call(ctx, sock, sluicev1.CNI_Add_FullMethodName, b)
	if err != nil {
		return nil, err
	}
	var resp sluicev1.AddResponse
	if err := proto.Unmarshal(out, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

func wantCode(t *testing.T, err error, want codes.Code, msgPart string) {
	t.Helper()
	var st *Status
	if !errors.As(err, &st) {
		t.Fatalf("error %v (%T), want a *Status with code %s", err, err, want)
	}
	if st.Code != want || !strings.Contains(st.Message, msgPart) {
		t.Fatalf("got %s %q, want %s containing %q", st.Code, st.Message, want, msgPart)
	}
}

func TestInteropRoundTrip(t *testing.T) {
	var got *sluicev1.AddRequest
	sock, _ := serveGRPC(t, func(_ context.Context, r *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
		got = r
		return &sluicev1.AddResponse{Enrolled: true, Mode: sluicev1.Mode_MODE_AMBIENT, Reason: "captured ✓"}, nil
	})
	req := &sluicev1.AddRequest{ApiVersion: 2, ContainerId: "c1", Netns: "/var/run/netns/p", IfName: "eth0",
		Pod: &sluicev1.PodRef{Namespace: "ns", Name: "p", Uid: "u"}, Ips: []*sluicev1.IPConfig{{Address: "10.0.0.2/24"}},
		Config: &sluicev1.PluginConfig{CniVersion: "1.0.0", Raw: []byte(`{"a":1}`)}, Warnings: []string{"w"}}
	resp, err := callAdd(context.Background(), sock, req)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, req) {
		t.Fatalf("server got %v, sent %v", got, req)
	}
	if !resp.Enrolled || resp.Mode != sluicev1.Mode_MODE_AMBIENT || resp.Reason != "captured ✓" {
		t.Fatalf("answer %v", resp)
	}
	// An empty answer is a zero-length message, not "no message".
	sock, _ = serveGRPC(t, func(context.Context, *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
		return &sluicev1.AddResponse{}, nil
	})
	if _, err := callAdd(context.Background(), sock, req); err != nil {
		t.Fatalf("empty answer: %v", err)
	}
}

// The server's code and message arrive exactly, whatever grpc-message's
// percent-encoding had to do to them.
func TestInteropStatus(t *testing.T) {
	for _, c := range []struct {
		code codes.Code
		msg  string
	}{
		{codes.InvalidArgument, "ip \"x\" is not an address"},
		{codes.Unavailable, "not ready: journal 100% verified? no\nsecond line"},
		{codes.FailedPrecondition, "api version 9: ünïcödé, 日本, and a tab\there"},
		{codes.ResourceExhausted, ""},
		{codes.Internal, "%zz %4 %"},
	} {
		sock, _ := serveGRPC(t, func(context.Context, *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
			return nil, status.Error(c.code, c.msg)
		})
		_, err := callAdd(context.Background(), sock, &sluicev1.AddRequest{})
		var st *Status
		if !errors.As(err, &st) || st.Code != c.code || st.Message != c.msg {
			t.Errorf("got %v, want %s %q", err, c.code, c.msg)
		}
	}
	sock, _ := serveGRPC(t, nil)
	_, err := Call(context.Background(), sock, "/sluice.v1.CNI/NoSuchVerb", nil)
	wantCode(t, err, codes.Unimplemented, "NoSuchVerb")
}

// A request larger than the server's 64 KiB stream window goes out in
// pieces as the server's WINDOW_UPDATEs come, and arrives whole.
func TestInteropLargeRequest(t *testing.T) {
	var got []byte
	sock, _ := serveGRPC(t, func(_ context.Context, r *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
		got = r.GetConfig().GetRaw()
		return &sluicev1.AddResponse{}, nil
	})
	raw := bytes.Repeat([]byte("0123456789abcdef"), 60<<10) // 960 KiB
	if _, err := callAdd(context.Background(), sock, &sluicev1.AddRequest{Config: &sluicev1.PluginConfig{Raw: raw}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, raw) {
		t.Fatalf("server got %d bytes, sent %d", len(got), len(raw))
	}
	// Over the server's limit: its refusal, not a hang on a full window.
	raw = bytes.Repeat([]byte("x"), 1<<20+1)
	_, err := callAdd(context.Background(), sock, &sluicev1.AddRequest{Config: &sluicev1.PluginConfig{Raw: raw}})
	wantCode(t, err, codes.ResourceExhausted, "larger than max")
}

func TestInteropLargeResponse(t *testing.T) {
	size := 3 << 20
	sock, _ := serveGRPC(t, func(context.Context, *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
		return &sluicev1.AddResponse{Reason: strings.Repeat("r", size)}, nil
	})
	resp, err := callAdd(context.Background(), sock, &sluicev1.AddRequest{})
	if err != nil || len(resp.Reason) != size {
		t.Fatalf("3 MiB answer: %v", err)
	}
	size = MaxResponseBytes + 1
	_, err = callAdd(context.Background(), sock, &sluicev1.AddRequest{})
	wantCode(t, err, codes.ResourceExhausted, "limit")
}

// The deadline reaches the server as grpc-timeout, and the client gives up
// at it whatever the server does.
func TestInteropDeadline(t *testing.T) {
	serverDeadline := make(chan time.Time, 1)
	sock, _ := serveGRPC(t, func(ctx context.Context, _ *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
		dl, _ := ctx.Deadline()
		serverDeadline <- dl
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := callAdd(ctx, sock, &sluicev1.AddRequest{})
	// Whichever side's timer fires first: the client's own deadline, or the
	// server's (grpc-timeout) cancelling the stream a moment before it.
	if c := Code(err); c != codes.DeadlineExceeded && !(c == codes.Canceled && strings.Contains(err.Error(), "RST_STREAM")) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	clientDeadline, _ := ctx.Deadline()
	if dl := <-serverDeadline; dl.IsZero() || dl.Before(clientDeadline.Add(-300*time.Millisecond)) {
		t.Fatalf("server's deadline %v, client's %v", dl, clientDeadline)
	}

	ctx, cancel = context.WithCancel(context.Background())
	go func() { <-serverDeadline; cancel() }()
	_, err = callAdd(ctx, sock, &sluicev1.AddRequest{})
	wantCode(t, err, codes.Canceled, "canceled")
}

// No agent, or an agent that dies in the middle of the call: Unavailable,
// which the plugin turns into "try again later" and a failed ADD.
func TestInteropServerAbsentOrGone(t *testing.T) {
	dir := t.TempDir()
	_, err := Call(context.Background(), filepath.Join(dir, "none.sock"), sluicev1.CNI_Add_FullMethodName, nil)
	wantCode(t, err, codes.Unavailable, "no such file")

	stale := filepath.Join(dir, "stale.sock")
	lis, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()
	_, err = Call(context.Background(), stale, sluicev1.CNI_Add_FullMethodName, nil)
	wantCode(t, err, codes.Unavailable, "refused")

	entered := make(chan struct{})
	var gs *grpc.Server
	sock, gs := serveGRPC(t, func(ctx context.Context, _ *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	go func() { <-entered; gs.Stop() }()
	_, err = callAdd(context.Background(), sock, &sluicev1.AddRequest{})
	if c := Code(err); c != codes.Unavailable {
		t.Fatalf("server stopped mid-call: %v, want Unavailable", err)
	}
}

// Metadata arrives at grpc-go's server as its metadata; one that would pass
// for gRPC's own headers is refused before anything is sent.
func TestInteropMetadata(t *testing.T) {
	var got metadata.MD
	sock, _ := serveGRPC(t, func(ctx context.Context, _ *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
		got, _ = metadata.FromIncomingContext(ctx)
		return &sluicev1.AddResponse{}, nil
	})
	b, _ := proto.Marshal(&sluicev1.AddRequest{ContainerId: "c"})
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, err := Call(context.Background(), sock, sluicev1.CNI_Add_FullMethodName, b,
		Header{"traceparent", tp}, Header{"tracestate", "a=1,b=2"}); err != nil {
		t.Fatal(err)
	}
	if v := got.Get("traceparent"); len(v) != 1 || v[0] != tp {
		t.Fatalf("traceparent %q", v)
	}
	if v := got.Get("tracestate"); len(v) != 1 || v[0] != "a=1,b=2" {
		t.Fatalf("tracestate %q", v)
	}
	for _, h := range []Header{{"grpc-timeout", "1S"}, {"Upper", "x"}, {"te", "x"}, {"x", "a\nb"}, {":path", "/x"}} {
		_, err := Call(context.Background(), sock, sluicev1.CNI_Add_FullMethodName, b, h)
		wantCode(t, err, codes.Internal, "cannot be sent")
	}
}
