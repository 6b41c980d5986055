package rpc

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// serve starts the agent's server on a socket in a fresh dir of t.
func serve(t *testing.T, uids []uint32) (string, *Authorizer) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	auth := NewAuthorizer(uids, slog.New(slog.DiscardHandler))
	gs, hs := NewServer(&CNI{}, &Debug{}, auth, nil, slog.New(slog.DiscardHandler))
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	lis, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return sock, auth
}

// A caller whose uid is not allowed is cut off at the handshake: the
// server reads nothing of it, not even sends its HTTP/2 settings, so no
// transport, stream or buffer ever exists for it.
func TestDisallowedUIDRefusedAtHandshake(t *testing.T) {
	sock, auth := serve(t, []uint32{uint32(os.Geteuid()) + 4242})
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	b, err := io.ReadAll(c)
	if len(b) > 0 || (err != nil && !isReset(err)) {
		t.Fatalf("a refused peer read %d bytes (%v): the server spoke HTTP/2 to it", len(b), err)
	}
	if auth.Refused() != 1 {
		t.Fatalf("refusals counted: %d, want 1", auth.Refused())
	}
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "reset by peer") || err == io.EOF
}

// An allowed caller is served, health included.
func TestAllowedUIDServed(t *testing.T) {
	sock, auth := serve(t, []uint32{uint32(os.Geteuid())})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if auth.Refused() != 0 {
		t.Fatalf("refused %d", auth.Refused())
	}
}

// The socket's directory is the agent's own or refused: a shared (1777) or
// foreign-owned one is left exactly as it was, never tightened.
func TestListenDirRules(t *testing.T) {
	nstest.RequireRoot(t)
	base := t.TempDir()
	shared := filepath.Join(base, "shared")
	os.Mkdir(shared, 0o700)
	if err := os.Chmod(shared, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(base, "foreign")
	os.Mkdir(foreign, 0o700)
	if err := os.Chown(foreign, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	for dir, mode := range map[string]os.FileMode{shared: 0o777 | os.ModeSticky, foreign: 0o700} {
		if l, err := Listen(filepath.Join(dir, "agent.sock")); err == nil {
			l.Close()
			t.Errorf("Listen in %s succeeded", dir)
		}
		fi, _ := os.Stat(dir)
		if fi.Mode().Perm() != mode.Perm() || fi.Mode()&os.ModeSticky != mode&os.ModeSticky {
			t.Errorf("%s changed to %v", dir, fi.Mode())
		}
	}
	// Our own 0755 dir is used as it is; a missing one is created 0700.
	own := filepath.Join(base, "own")
	os.Mkdir(own, 0o755)
	os.Chmod(own, 0o755)
	for _, dir := range []string{own, filepath.Join(base, "new", "run")} {
		l, err := Listen(filepath.Join(dir, "agent.sock"))
		if err != nil {
			t.Fatalf("Listen in %s: %v", dir, err)
		}
		l.Close()
	}
	if fi, _ := os.Stat(own); fi.Mode().Perm() != 0o755 {
		t.Errorf("own dir changed to %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(base, "new", "run")); fi.Mode().Perm() != 0o700 {
		t.Errorf("created dir is %v, want 0700", fi.Mode())
	}
}

// Ours turns false when the socket file is removed or replaced.
func TestListenerOurs(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if ok, why := l.Ours(); !ok {
		t.Fatal(why)
	}
	os.Remove(sock)
	if ok, _ := l.Ours(); ok {
		t.Fatal("Ours with the socket file removed")
	}
	other, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if ok, _ := l.Ours(); ok {
		t.Fatal("Ours with another socket in its place")
	}
}

// One call's warnings cannot flood the log: a handful, then a count.
func TestWarningsCapped(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	warnings := make([]string, 150001)
	for i := range warnings {
		warnings[i] = strings.Repeat("w", 4096)
	}
	h := logCalls(log)
	_, err := h(context.Background(), &sluicev1.AddRequest{Warnings: warnings}, &grpc.UnaryServerInfo{FullMethod: "/x"},
		func(context.Context, any) (any, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(buf.String(), "\n")
	if lines > maxWarnings+2 || !strings.Contains(buf.String(), "dropped=149993") {
		t.Fatalf("%d log lines (%d bytes) for 150001 warnings", lines, buf.Len())
	}
	if buf.Len() > 64<<10 {
		t.Fatalf("%d bytes of log for one call", buf.Len())
	}
}
