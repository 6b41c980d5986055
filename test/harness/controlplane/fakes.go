package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/istioadopt"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
)

// Ztunnel stands in for the ZDS server: connected, it acks every pod;
// disconnected, it refuses with ztunnel.ErrNotConnected (the store then
// rolls the enrolment back and wraps workloads.ErrZtunnel), and
// AwaitConnection waits for a Connect within the caller's deadline, as
// ztunnel.Server's does under --ztunnel-wait. It remembers the pods it
// holds.
type Ztunnel struct {
	mu        sync.Mutex
	connected bool
	joined    chan struct{} // closed by the next Connect(true)
	noWait    bool
	waiting   int
	pods      []string // uids, in the order added
}

// NoWait makes AwaitConnection return at once, as --ztunnel-wait 0 does:
// the hand-over then fails with no ztunnel connected.
func (z *Ztunnel) NoWait() {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.noWait = true
}

// Waiting is how many AwaitConnection calls wait for a Connect.
func (z *Ztunnel) Waiting() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.waiting
}

// Connect connects (true) or disconnects ztunnel.
func (z *Ztunnel) Connect(on bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.connected = on
	if on && z.joined != nil {
		close(z.joined)
		z.joined = nil
	}
}

// Ready is ztunnel.Server.Ready's shape, for istioadopt's ZtunnelReady.
func (z *Ztunnel) Ready() (bool, string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if !z.connected {
		return false, "no ztunnel connected"
	}
	return true, ""
}

// AwaitConnection returns once ztunnel is connected, or fails with
// ztunnel.ErrNotConnected when ctx ends first; after NoWait it returns at
// once.
func (z *Ztunnel) AwaitConnection(ctx context.Context, w ztunnel.Workload) error {
	z.mu.Lock()
	if z.connected || z.noWait {
		z.mu.Unlock()
		return nil
	}
	if z.joined == nil {
		z.joined = make(chan struct{})
	}
	joined := z.joined
	z.waiting++
	z.mu.Unlock()
	defer func() {
		z.mu.Lock()
		z.waiting--
		z.mu.Unlock()
	}()
	select {
	case <-joined:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("add workload %s to ztunnel: %w: waited for one until the caller's deadline", w.UID, ztunnel.ErrNotConnected)
	}
}

func (z *Ztunnel) Add(_ context.Context, w ztunnel.Workload) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if !z.connected {
		return fmt.Errorf("add workload %s to ztunnel: %w", w.UID, ztunnel.ErrNotConnected)
	}
	if !slices.Contains(z.pods, w.UID) {
		z.pods = append(z.pods, w.UID)
	}
	return nil
}

func (z *Ztunnel) Del(_ context.Context, uid string) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.pods = slices.DeleteFunc(z.pods, func(u string) bool { return u == uid })
	return nil
}

// Hold has ztunnel hold pod uid already: an ambient pod istio-cni
// enrolled, listed in the snapshot as pending (istioadopt.Pending).
func (z *Ztunnel) Hold(uid string) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if !slices.Contains(z.pods, uid) {
		z.pods = append(z.pods, uid)
	}
}

// Holds reports whether ztunnel holds the pod.
func (z *Ztunnel) Holds(uid string) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return slices.Contains(z.pods, uid)
}

// Istio is istio-cni's capture per netns, an istioadopt.Kernel: Program
// leaves a capture as istio-cni would, Detect reads it, Remove takes it out.
type Istio struct {
	mu       sync.Mutex
	captures map[uint64]istioadopt.Capture // by netns inode
	failWith error
	failRm   error
}

var _ istioadopt.Kernel = (*Istio)(nil)

// NewIstio is a node where istio-cni captured nothing.
func NewIstio() *Istio { return &Istio{captures: map[uint64]istioadopt.Capture{}} }

// Sidecar and Ambient are the captures istio-cni leaves in its native
// nftables mode.
var (
	Sidecar = istioadopt.Capture{Tables: []istioadopt.Table{{Family: istioadopt.INet, Name: "istio-proxy-nat"}}}
	Ambient = istioadopt.Capture{Tables: []istioadopt.Table{{Family: istioadopt.INet, Name: "istio-ambient-nat"}}}
)

// Program leaves c in the netns with inode ino.
func (i *Istio) Program(ino uint64, c istioadopt.Capture) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.captures[ino] = c
}

// FailDetect makes every Detect fail with err (nil: succeed again).
func (i *Istio) FailDetect(err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.failWith = err
}

// FailRemove makes every Remove fail with err (nil: succeed again), as
// when Istio's rules cannot be taken out.
func (i *Istio) FailRemove(err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.failRm = err
}

// Capture is what istio-cni holds in the netns with inode ino.
func (i *Istio) Capture(ino uint64) istioadopt.Capture {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.captures[ino]
}

func (i *Istio) Detect(ns netns.NsHandle) (istioadopt.Capture, error) {
	ino, err := redirecttest.Inode(ns)
	if err != nil {
		return istioadopt.Capture{}, err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.failWith != nil {
		return istioadopt.Capture{}, i.failWith
	}
	return i.captures[ino], nil
}

func (i *Istio) Remove(ns netns.NsHandle, _ istioadopt.Capture) error {
	ino, err := redirecttest.Inode(ns)
	if err != nil {
		return err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.failRm != nil {
		return i.failRm
	}
	delete(i.captures, ino)
	return nil
}

// Proc is a host /proc of plain files, laid out as podns.FindPodNetns reads
// one: per sandbox, <pid>/ns/net, a cgroup naming the pod as the kubelet's
// cgroupfs driver does, and a stat with a start time. The netns path it
// yields, /proc/<pid>/ns/net, is opened through the Node's Namespaces.
type Proc struct {
	Dir string
	mu  sync.Mutex
	pid int
}

// NewProc is an empty /proc in t's temp dir.
func NewProc(t *testing.T) *Proc {
	dir := filepath.Join(t.TempDir(), "proc")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &Proc{Dir: dir, pid: 4000}
}

// Sandbox adds a pause process of pod uid and returns the netns path the
// agent will find for it.
func (p *Proc) Sandbox(t *testing.T, uid string) string {
	t.Helper()
	p.mu.Lock()
	p.pid++
	pid := strconv.Itoa(p.pid)
	p.mu.Unlock()
	dir := filepath.Join(p.Dir, pid)
	if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Fields 3 to 21 of stat, then the start time (22), as the kernel writes them.
	stat := pid + " (pause) S" + strings.Repeat(" 0", 18) + " " + pid + " 0\n"
	files := map[string]string{
		"ns/net": "",
		"cgroup": fmt.Sprintf("0::/kubepods/besteffort/pod%s/%s\n", uid, pid),
		"stat":   stat,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return "/proc/" + pid + "/ns/net"
}
