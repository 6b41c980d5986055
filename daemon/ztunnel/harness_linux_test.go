package ztunnel

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// harness runs a Server on a socket of its own, with real namespaces opened
// through podns as the agent does.
type harness struct {
	t     *testing.T
	srv   *Server
	path  string
	nsDir string

	stop func() error // cancels Run and returns what it returned

	mu        sync.Mutex
	workloads []Workload
}

// shortTempDir keeps socket paths under the 108-byte sun_path limit, which
// t.TempDir's test-named directories can exceed.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "zds")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// start runs a server; mutate adjusts its config first.
func start(t *testing.T, mutate func(*Config)) *harness {
	t.Helper()
	nstest.RequireRoot(t)
	h := &harness{t: t, path: filepath.Join(shortTempDir(t), "ztunnel.sock"), nsDir: shortTempDir(t)}
	opener, err := podns.NewOpener([]string{h.nsDir}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	// Timeout bounds every answer the fake ztunnel (a test goroutine) owes
	// the server, from its hello on: far beyond a loaded machine's stall,
	// so only the tests that wait for it to pass (they set their own) see
	// it pass.
	cfg := Config{
		Path:      h.path,
		Snapshot:  h.snapshot,
		Open:      opener.Open,
		Logger:    testLogger(),
		Timeout:   30 * time.Second,
		Keepalive: 20 * time.Millisecond,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	h.srv, err = New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.srv.Run(ctx) }()
	h.stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

func (h *harness) snapshot() []Workload {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Workload(nil), h.workloads...)
}

// enroll creates a namespace and lists a workload with it in the snapshot.
func (h *harness) enroll(uid string) (Workload, uint64) {
	h.t.Helper()
	w, ino := h.pod(uid)
	h.mu.Lock()
	h.workloads = append(h.workloads, w)
	h.mu.Unlock()
	return w, ino
}

// pod creates a namespace for a workload without enrolling it.
func (h *harness) pod(uid string) (Workload, uint64) {
	h.t.Helper()
	ns := nstest.NewIn(h.t, h.nsDir, uid)
	w := Workload{UID: uid, Name: "pod-" + uid, Namespace: "ns-" + uid, ServiceAccount: "sa-" + uid, Netns: ns.Path}
	return w, inode(h.t, ns.Path)
}

// enrollGone lists a workload whose netns no longer exists.
func (h *harness) enrollGone(uid string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.workloads = append(h.workloads, Workload{UID: uid, Netns: filepath.Join(h.nsDir, uid)})
}

// add runs Add in the background, for tests that play ztunnel meanwhile.
func (h *harness) add(ctx context.Context, w Workload) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- h.srv.Add(ctx, w) }()
	return errc
}

// addAcked runs Add of w, expects z to receive exactly that Add with the
// netns inode ino (0: not checked), acks it, and fails the test unless Add
// then succeeds.
func (h *harness) addAcked(z *fakeZtunnel, w Workload, ino uint64) {
	h.t.Helper()
	errc := h.add(context.Background(), w)
	if r := z.recv(); r.String() != "add:"+w.UID || (ino != 0 && r.netns != ino) {
		h.t.Fatalf("ztunnel got %s with netns %d, want add:%s with %d", r, r.netns, w.UID, ino)
	}
	z.ack("")
	if err := <-errc; err != nil {
		h.t.Fatalf("Add %s: %v", w.UID, err)
	}
}

func (h *harness) del(ctx context.Context, uid string) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- h.srv.Del(ctx, uid) }()
	return errc
}

// connected waits until n ztunnels are connected.
func (h *harness) connected(n int) {
	h.t.Helper()
	nstest.Eventually(h.t, 5*time.Second, func() bool { return h.srv.Connections() == n },
		"want %d ztunnel connections", n)
}

func kinds(rs []request) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}
