package workloads

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// A scenario that holds on any kernel is written once and runs on both:
// redirecttest's fake, as any user in milliseconds, and the real netns and
// nftables, as root (make test). A row acts on pods' namespaces through a
// testbed and asserts what both kernels show.

// kernelUnder is one kernel a scenario runs on; skip, when set, is why it
// cannot run here.
type kernelUnder struct {
	name, skip string
	bed        func(t *testing.T, ambient bool) *testbed
}

// kernels yields the fake kernel always, and the real one, whose subtests
// skip, saying why, unless the test runs as root with nft and nsenter to
// read the tables back.
func kernels(t *testing.T) []kernelUnder {
	t.Helper()
	real := kernelUnder{name: "real", bed: realBed}
	if os.Geteuid() != 0 {
		real.skip = "real kernel: needs root to create network namespaces and nftables state (make test runs it as root)"
	}
	for _, tool := range []string{"nft", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil && real.skip == "" {
			real.skip = "real kernel: no " + tool + " to read the tables back (make prereqs installs it)"
		}
	}
	return []kernelUnder{{name: "fake", bed: fakeBed}, real}
}

// testbed is a Store over one kernel, and what a scenario does to the
// pods' namespaces there.
type testbed struct {
	state string
	store *Store
	open  func(t *testing.T) *Store // a Store on the same journal: the agent restarted
	// kernel is the Store's kernel: it counts the Store's calls and fails
	// them on demand; raw is the kernel behind it, for the test's own
	// changes (another agent's table, a host table recreated empty).
	kernel *watched
	raw    redirect.Kernel
	opener NetnsOpener
	heard  *heard
	zt     *fakeZtunnel   // ambient beds only
	host   netns.NsHandle // ambient beds only
	namespaces
}

// namespaces is what a scenario does to pods' namespaces, each kernel its
// own way. Paths are those add returned.
type namespaces interface {
	// add makes a new netns for container id and returns its path and inode.
	add(t *testing.T, id string) (string, uint64)
	hasTable(t *testing.T, path string) bool
	// delete tears the netns at path down.
	delete(t *testing.T, path string)
	// replace makes path name a new netns (pid reuse) and returns its inode.
	replace(t *testing.T, path string) uint64
	// tamper changes our table at path behind the agent's back, and
	// returns the first drift Verify reports for it.
	tamper(t *testing.T, path string) string
	hostHas(t *testing.T, ip string) bool
}

func fakeBed(t *testing.T, ambient bool) *testbed {
	var u *unit
	var zt *fakeZtunnel
	if ambient {
		u, zt = newAmbientUnit(t)
	} else {
		u = newUnit(t)
	}
	b := &testbed{state: u.state, store: u.store, open: u.open, kernel: u.seam, raw: u.kernel, opener: u.ns,
		heard: &u.heard, zt: zt, namespaces: fakeNamespaces{u}}
	if ambient {
		b.host = u.ambient.Host
	}
	return b
}

func realBed(t *testing.T, ambient bool) *testbed {
	var f *fixture
	rn := realNamespaces{}
	var zt *fakeZtunnel
	if ambient {
		af := newAmbientFixture(t)
		f, rn.host, zt = af.fixture, af, af.zt
	} else {
		f = newFixture(t)
	}
	rn.f = f
	b := &testbed{state: f.state, store: f.store, open: func(t *testing.T) *Store { return f.open(t) }, kernel: f.kernel,
		raw: f.kernel.Kernel, opener: f.opener(t), heard: &f.heard, zt: zt, namespaces: rn}
	if ambient {
		b.host = f.ambient.Host
	}
	return b
}

// record is a sidecar enrolment of id's eth0 in the netns at path.
func (b *testbed) record(id, path string) Record {
	return Record{Attachment: Attachment{ContainerID: id, IfName: "eth0"}, Network: testNetwork, Netns: path, Spec: redirect.DefaultSpec()}
}

// ambientRecord is pod uid's ambient enrolment of id's eth0 in a new netns.
func (b *testbed) ambientRecord(t *testing.T, id, uid, ip string) Record {
	r := ambientUnitRecord(id, uid, ip)
	r.Netns, _ = b.add(t, id)
	return r
}

// enroll makes a netns for id and enrolls id's eth0 there.
func (b *testbed) enroll(t *testing.T, id string) (Record, uint64) {
	t.Helper()
	path, ino := b.add(t, id)
	r := b.record(id, path)
	if err := b.store.Enroll(context.Background(), r); err != nil {
		t.Fatalf("enroll %s: %v", id, err)
	}
	return r, ino
}

// plant programs a sidecar table no record of ours owns into the netns at
// path: another pod's, as far as the store can know.
func (b *testbed) plant(t *testing.T, path string) {
	t.Helper()
	rs, err := redirect.Build(redirect.DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	h, err := b.opener.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := b.raw.Apply(redirect.Netns(h), rs); err != nil {
		t.Fatalf("plant a table in %s: %v", path, err)
	}
}

// dropHostIP takes ip out of the host probe table, as a table recreated
// empty has it.
func (b *testbed) dropHostIP(t *testing.T, ip string) {
	t.Helper()
	if err := b.raw.RemoveHostIPs(redirect.Netns(b.host), netip.MustParseAddr(ip)); err != nil {
		t.Fatal(err)
	}
}

type fakeNamespaces struct{ u *unit }

func (n fakeNamespaces) add(_ *testing.T, id string) (string, uint64) {
	path := "/netns/" + id
	return path, n.u.ns.Add(path)
}

func (n fakeNamespaces) hasTable(_ *testing.T, path string) bool {
	return n.u.hasTable(n.u.ns.Inode(path))
}

func (n fakeNamespaces) delete(_ *testing.T, path string) { n.u.ns.Delete(path) }

func (n fakeNamespaces) replace(_ *testing.T, path string) uint64 { return n.u.ns.Replace(path) }

func (n fakeNamespaces) tamper(t *testing.T, path string) string {
	if !n.u.kernel.Tamper(n.u.ns.Inode(path)) {
		t.Fatalf("no table to tamper with at %s", path)
	}
	return "table inet sluice: a rule was changed (tampered)"
}

func (n fakeNamespaces) hostHas(_ *testing.T, ip string) bool { return n.u.hostHas(ip) }

type realNamespaces struct {
	f    *fixture
	host *ambientFixture // ambient beds only
}

func (n realNamespaces) add(t *testing.T, id string) (string, uint64) {
	t.Helper()
	ns := nstest.NewIn(t, n.f.root, id)
	return ns.Path, netnsInode(t, ns.Path)
}

func (n realNamespaces) hasTable(_ *testing.T, path string) bool { return tableVia(path) }

func (n realNamespaces) delete(_ *testing.T, path string) {
	unix.Unmount(path, unix.MNT_DETACH)
	os.Remove(path)
}

func (n realNamespaces) replace(t *testing.T, path string) uint64 {
	t.Helper()
	n.delete(t, path)
	ns := nstest.NewIn(t, filepath.Dir(path), filepath.Base(path))
	return netnsInode(t, ns.Path)
}

func (n realNamespaces) tamper(t *testing.T, path string) string {
	t.Helper()
	if out, err := exec.Command("nsenter", "--net="+path, "--", "nft", "flush", "table", "inet", "sluice").CombinedOutput(); err != nil {
		t.Fatalf("flush our table at %s: %v\n%s", path, err, out)
	}
	return "chain prerouting is empty (flushed?): all 1 rules missing" // the first chain of the sidecar ruleset
}

func (n realNamespaces) hostHas(t *testing.T, ip string) bool { return n.host.hostHas(t, ip) }

func netnsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// watched is a kernel with Fake's Fail and Calls, by method: each call is
// counted, and a method made to fail returns its error without reaching
// the kernel behind.
type watched struct {
	redirect.Kernel
	mu    sync.Mutex
	calls map[redirecttest.Op]int
	fail  map[redirecttest.Op]error
}

// Fail makes every later call of op return err, until Fail(op, nil).
func (w *watched) Fail(op redirecttest.Op, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail == nil {
		w.fail = map[redirecttest.Op]error{}
	}
	w.fail[op] = err
}

// Calls counts the calls of op so far, failed ones included.
func (w *watched) Calls(op redirecttest.Op) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[op]
}

func (w *watched) begin(op redirecttest.Op) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.calls == nil {
		w.calls = map[redirecttest.Op]int{}
	}
	w.calls[op]++
	return w.fail[op]
}

func (w *watched) Apply(ns redirect.Netns, r *redirect.Ruleset) (redirect.Gen, error) {
	if err := w.begin(redirecttest.OpApply); err != nil {
		return 0, err
	}
	return w.Kernel.Apply(ns, r)
}

func (w *watched) Remove(ns redirect.Netns, had *redirect.Ruleset) error {
	if err := w.begin(redirecttest.OpRemove); err != nil {
		return err
	}
	return w.Kernel.Remove(ns, had)
}

func (w *watched) Verify(ns redirect.Netns, r *redirect.Ruleset) ([]string, error) {
	if err := w.begin(redirecttest.OpVerify); err != nil {
		return nil, err
	}
	return w.Kernel.Verify(ns, r)
}

func (w *watched) VerifySince(ns redirect.Netns, r *redirect.Ruleset, since redirect.Gen) ([]string, redirect.Gen, error) {
	if err := w.begin(redirecttest.OpVerifySince); err != nil {
		return nil, 0, err
	}
	return w.Kernel.VerifySince(ns, r, since)
}

func (w *watched) AddHostIPs(ns redirect.Netns, ips ...netip.Addr) error {
	if err := w.begin(redirecttest.OpAddHostIPs); err != nil {
		return err
	}
	return w.Kernel.AddHostIPs(ns, ips...)
}

func (w *watched) RemoveHostIPs(ns redirect.Netns, ips ...netip.Addr) error {
	if err := w.begin(redirecttest.OpRemoveHostIPs); err != nil {
		return err
	}
	return w.Kernel.RemoveHostIPs(ns, ips...)
}

// heard keeps what OnReassert was told: "attachment: first drift" each.
type heard struct {
	mu   sync.Mutex
	list []string
}

func (h *heard) reassert(r Record, drift []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.list = append(h.list, r.Attachment.String()+": "+drift[0])
}

func (h *heard) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.list...)
}
