package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/ambientmesh"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

type cniFixture struct {
	root, state string
	cni         *CNI
	store       *workloads.Store
}

func newCNIFixture(t *testing.T, state string) *cniFixture {
	return newCNIFixtureWith(t, state, nil)
}

func newCNIFixtureWith(t *testing.T, state string, amb *workloads.Ambient) *cniFixture {
	t.Helper()
	nstest.RequireRoot(t)
	f := &cniFixture{root: t.TempDir(), state: state}
	o, err := podns.NewOpener([]string{f.root}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	f.store, err = workloads.Open(workloads.Config{Dir: state, Opener: o, Kernel: kernel.Netlink{},
		Log: slog.New(slog.DiscardHandler), Ambient: amb})
	if err != nil {
		t.Fatal(err)
	}
	f.cni = &CNI{Policy: &policy.Static{Spec: redirect.DefaultSpec()}, Workloads: f.store,
		Ready: func() (bool, string) { return true, "" }, Inflight: NewInflight(4)}
	return f
}

func (f *cniFixture) add(t *testing.T, id string) (*nstest.NS, error) {
	t.Helper()
	ns := nstest.NewIn(t, f.root, id)
	_, err := f.cni.Add(context.Background(), &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2,
		ContainerId: id, Netns: ns.Path, IfName: "eth0", Config: &sluicev1.PluginConfig{NetworkName: "net-a"}})
	return ns, err
}

func code(err error) codes.Code { return status.Code(err) }

// A state dir removed under the agent is the agent's problem, never the
// caller's (code 4 made the runtime blame the pod): it is recreated.
func TestAddRecreatesMissingStateDir(t *testing.T) {
	f := newCNIFixture(t, filepath.Join(t.TempDir(), "state"))
	if err := os.RemoveAll(f.state); err != nil {
		t.Fatal(err)
	}
	if _, err := f.add(t, "c1"); err != nil {
		t.Fatalf("ADD with the state dir removed: %v (code %v)", err, code(err))
	}
	if _, err := os.Stat(filepath.Join(f.state, "c1:eth0.json")); err != nil {
		t.Fatalf("journal record: %v", err)
	}
}

// A full disk is answered "try again later", not 999 with a confusing
// message, and leaves no rules behind.
func TestAddOnFullDiskIsTryAgain(t *testing.T) {
	nstest.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	f := newCNIFixture(t, dir)
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := filler.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	filler.Close()
	ns, err := f.add(t, "full")
	if code(err) != codes.ResourceExhausted {
		t.Fatalf("ADD on a full state dir: code %v (%v), want ResourceExhausted", code(err), err)
	}
	if ns.Command("nft", "list", "table", "inet", "sluice").Run() == nil {
		t.Fatal("an ADD that could not journal left its table")
	}
}

// The agent's own failures are never InvalidArgument.
func TestJournalErrorsAreNotTheCallers(t *testing.T) {
	for _, err := range []error{
		&workloads.JournalError{Op: "write", Err: os.ErrNotExist},
		&workloads.JournalError{Op: "sync", Err: unix.EIO},
	} {
		if c := code(toStatus(err)); c == codes.InvalidArgument || c == codes.OK {
			t.Errorf("%v: code %v", err, c)
		}
	}
	if c := code(toStatus(&workloads.JournalError{Op: "write", Err: unix.ENOSPC})); c != codes.ResourceExhausted {
		t.Errorf("ENOSPC: code %v", c)
	}
}

// A GC without cni.dev/valid-attachments is refused and removes nothing;
// an older plugin's non-empty list still counts as the key present.
func TestGCWithoutValidAttachmentsIsRefused(t *testing.T) {
	f := newCNIFixture(t, t.TempDir())
	ns, err := f.add(t, "live")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.cni.GC(context.Background(), &sluicev1.GCRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2,
		Config: &sluicev1.PluginConfig{NetworkName: "net-a"}})
	if code(err) != codes.InvalidArgument {
		t.Fatalf("GC without the key: code %v (%v)", code(err), err)
	}
	if ns.Command("nft", "list", "table", "inet", "sluice").Run() != nil || len(f.store.List()) != 1 {
		t.Fatal("a refused GC removed state")
	}
	resp, err := f.cni.GC(context.Background(), &sluicev1.GCRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2,
		Config:           &sluicev1.PluginConfig{NetworkName: "net-a"},
		ValidAttachments: []*sluicev1.Attachment{{ContainerId: "other", IfName: "eth0"}}})
	if err != nil || len(resp.Removed) != 1 {
		t.Fatalf("GC from an older plugin with a list: %v %v", resp, err)
	}
}

// fakeAnnotator records what istiod would be told, in order (a seam fake).
type fakeAnnotator struct{ got []string }

func (a *fakeAnnotator) Set(_ context.Context, pod policy.Pod, value string) {
	a.got = append(a.got, pod.UID+"="+value)
}

func (a *fakeAnnotator) Apply(ctx context.Context, pod policy.Pod, value string) error {
	a.Set(ctx, pod, value)
	return nil
}

type fakeZtunnel struct{ refuse error }

func (z *fakeZtunnel) Add(context.Context, ztunnel.Workload) error { return z.refuse }
func (z *fakeZtunnel) Del(context.Context, string) error           { return nil }

// AwaitConnection finds the fake connected.
func (z *fakeZtunnel) AwaitConnection(context.Context, ztunnel.Workload) error { return nil }

// An ambient ADD marks the pod for istiod before it returns, as Istio's
// does; one ztunnel refused marks it pending.
func TestAmbientAddAnnotatesBeforeReturning(t *testing.T) {
	nstest.RequireRoot(t)
	host := nstest.New(t, "host")
	h := host.Handle(t)
	if err := (kernel.Netlink{}).EnsureHostTable(redirect.Netns(h), redirect.DefaultHostConfig()); err != nil {
		t.Fatal(err)
	}
	zt := &fakeZtunnel{}
	f := newCNIFixtureWith(t, t.TempDir(), &workloads.Ambient{Ztunnel: zt, Host: h})
	f.cni.Policy = &policy.Static{Spec: redirect.DefaultAmbientSpec()}
	ann := &fakeAnnotator{}
	f.cni.Ambient = &ambientmesh.Mesh{Store: f.store, Redirection: ann}
	add := func(id string) error {
		ns := nstest.NewIn(t, f.root, id)
		_, err := f.cni.Add(context.Background(), &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2,
			ContainerId: id, Netns: ns.Path, IfName: "eth0", Pod: &sluicev1.PodRef{Namespace: "ns", Name: id, Uid: "uid-" + id},
			Ips: []*sluicev1.IPConfig{{Address: "10.1.0.2/24"}}})
		return err
	}
	if err := add("ok"); err != nil {
		t.Fatal(err)
	}
	zt.refuse = errors.New("ztunnel says no")
	if err := add("refused"); code(err) == codes.OK {
		t.Fatal("ADD succeeded with ztunnel refusing")
	}
	if want := []string{"uid-ok=enabled", "uid-refused=pending"}; !slices.Equal(ann.got, want) {
		t.Fatalf("annotations %v, want %v", ann.got, want)
	}
}

// ADDs naming FIFOs (whose open would block until a writer comes) are
// refused at once and hold no in-flight slot or lock: a valid ADD right
// after them is served.
func TestFIFONetnsHoldsNoSlot(t *testing.T) {
	f := newCNIFixture(t, t.TempDir())
	var fifos []string
	for i := range 8 {
		p := filepath.Join(f.root, fmt.Sprintf("fifo%d", i))
		if err := unix.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		fifos = append(fifos, p)
	}
	t.Cleanup(func() {
		for _, p := range fifos { // release opens still blocked (the code before the fix)
			if fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
		}
	})
	errs := make(chan error, len(fifos))
	for i, p := range fifos {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := f.cni.Add(ctx, &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2,
				ContainerId: fmt.Sprintf("fifo%d", i), Netns: p, IfName: "eth0"})
			errs <- err
		}()
	}
	for range fifos {
		select {
		case err := <-errs:
			if code(err) != codes.InvalidArgument {
				t.Errorf("ADD into a FIFO: code %v (%v), want InvalidArgument", code(err), err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("an ADD into a FIFO never answered")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ns := nstest.NewIn(t, f.root, "valid")
	if _, err := f.cni.Add(ctx, &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2,
		ContainerId: "valid", Netns: ns.Path, IfName: "eth0"}); err != nil {
		t.Fatalf("valid ADD after the FIFOs: %v", err)
	}
}
