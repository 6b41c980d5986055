// Package redirecttest has in-memory stand-ins for the kernel seam of
// package redirect, for tests of the logic above it (workloads, rpc) that
// must run without root: Fake is a redirect.Kernel keyed by netns inode,
// Namespaces an opener of pod netns paths. They are fakes for pure logic:
// the kernel tests of redirect/kernel, and the e2e tests, test the real
// thing.
package redirecttest

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// Op names one method of redirect.Kernel, for Fail and Calls.
type Op string

const (
	OpApply         Op = "Apply"
	OpRemove        Op = "Remove"
	OpVerify        Op = "Verify" // a table read back whole (Verify, or VerifySince that had to)
	OpVerifySince   Op = "VerifySince"
	OpAddHostIPs    Op = "AddHostIPs"
	OpRemoveHostIPs Op = "RemoveHostIPs"
)

// Fake is a redirect.Kernel in memory. Each netns is known by the inode of
// the handle passed in (Namespaces hands out real file descriptors, so
// two handles on one netns agree). Apply is atomic like the real one: a
// failed Apply changes nothing. The zero value is not usable; use NewFake.
type Fake struct {
	mu       sync.Mutex
	tables   map[uint64]*redirect.Ruleset
	tampered map[uint64]bool
	gens     map[uint64]redirect.Gen // each netns's generation, moved on by every change
	hostIPs  map[uint64]map[netip.Addr]bool
	fail     map[Op]error
	calls    map[Op]int
	// removedWith is what each netns's last Remove was told was applied.
	removedWith map[uint64]*redirect.Ruleset
}

var _ redirect.Kernel = (*Fake)(nil)

// NewFake is a kernel with no tables and no host addresses.
func NewFake() *Fake {
	return &Fake{tables: map[uint64]*redirect.Ruleset{}, tampered: map[uint64]bool{}, gens: map[uint64]redirect.Gen{},
		hostIPs: map[uint64]map[netip.Addr]bool{}, fail: map[Op]error{}, calls: map[Op]int{},
		removedWith: map[uint64]*redirect.Ruleset{}}
}

// RemovedWith is the ruleset the last Remove of netns ino was told had
// been applied there (nil: none, or not told).
func (f *Fake) RemovedWith(ino uint64) *redirect.Ruleset {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.removedWith[ino]
}

// Fail makes every later call of op return err, until Fail(op, nil).
func (f *Fake) Fail(op Op, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[op] = err
}

// Calls counts the calls of op so far, failed ones included.
func (f *Fake) Calls(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Tamper changes the table in the netns with inode ino behind the agent's
// back (someone flushed a chain): Verify reports drift until the next
// Apply. It reports whether there was a table to tamper with.
func (f *Fake) Tamper(ino uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tables[ino] == nil {
		return false
	}
	f.tampered[ino] = true
	f.gens[ino]++
	return true
}

// Table is the ruleset last applied to the netns with inode ino.
func (f *Fake) Table(ino uint64) (*redirect.Ruleset, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.tables[ino]
	return r, ok
}

// HostIPs lists the host probe table's addresses in the netns with inode
// ino, sorted.
func (f *Fake) HostIPs(ino uint64) []netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []netip.Addr
	for a := range f.hostIPs[ino] {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// begin counts a call and returns the netns inode and the injected error.
func (f *Fake) begin(op Op, ns redirect.Netns) (uint64, error) {
	f.calls[op]++
	if err := f.fail[op]; err != nil {
		return 0, err
	}
	return Inode(netns.NsHandle(ns))
}

func (f *Fake) Apply(ns redirect.Netns, r *redirect.Ruleset) (redirect.Gen, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ino, err := f.begin(OpApply, ns)
	if err != nil {
		return 0, err
	}
	f.tables[ino] = r
	delete(f.tampered, ino)
	f.gens[ino]++
	return f.gens[ino], nil
}

func (f *Fake) Remove(ns redirect.Netns, had *redirect.Ruleset) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ino, err := f.begin(OpRemove, ns)
	if err != nil {
		return err
	}
	f.removedWith[ino] = had
	delete(f.tables, ino)
	delete(f.tampered, ino)
	f.gens[ino]++
	return nil
}

func (f *Fake) Verify(ns redirect.Netns, want *redirect.Ruleset) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ino, err := f.begin(OpVerify, ns)
	if err != nil {
		return nil, err
	}
	return f.compare(ino, want), nil
}

// VerifySince skips the comparison, as the real one skips reading the
// table, while the netns's generation is still since; otherwise it counts
// as a Verify too.
func (f *Fake) VerifySince(ns redirect.Netns, want *redirect.Ruleset, since redirect.Gen) ([]string, redirect.Gen, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ino, err := f.begin(OpVerifySince, ns)
	if err != nil {
		return nil, 0, err
	}
	gen := f.gens[ino]
	if since != 0 && since == gen && f.tables[ino] != nil {
		return nil, gen, nil
	}
	if _, err := f.begin(OpVerify, ns); err != nil {
		return nil, 0, err
	}
	return f.compare(ino, want), gen, nil
}

func (f *Fake) compare(ino uint64, want *redirect.Ruleset) []string {
	have := f.tables[ino]
	switch {
	case have == nil:
		return []string{"table inet " + redirect.TableName + " is missing"}
	case f.tampered[ino]:
		return []string{"table inet " + redirect.TableName + ": a rule was changed (tampered)"}
	case have.Hash() != want.Hash():
		return []string{fmt.Sprintf("table inet %s holds ruleset %.12s, want %.12s", redirect.TableName, have.Hash(), want.Hash())}
	}
	return nil
}

func (f *Fake) AddHostIPs(ns redirect.Netns, ips ...netip.Addr) error {
	return f.changeHostIPs(OpAddHostIPs, ns, ips)
}

func (f *Fake) RemoveHostIPs(ns redirect.Netns, ips ...netip.Addr) error {
	return f.changeHostIPs(OpRemoveHostIPs, ns, ips)
}

func (f *Fake) changeHostIPs(op Op, ns redirect.Netns, ips []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ino, err := f.begin(op, ns)
	if err != nil {
		return err
	}
	for _, ip := range ips {
		if !ip.IsValid() {
			return fmt.Errorf("%s: invalid address", op)
		}
	}
	set := f.hostIPs[ino]
	if set == nil {
		set = map[netip.Addr]bool{}
		f.hostIPs[ino] = set
	}
	for _, ip := range ips {
		if op == OpAddHostIPs {
			set[ip.Unmap()] = true
		} else {
			delete(set, ip.Unmap())
		}
	}
	return nil
}

// Inode is the inode of the file ns is a handle on: for a real netns its
// identity, for one from Namespaces the stand-in file's.
func Inode(ns netns.NsHandle) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(ns), &st); err != nil {
		return 0, fmt.Errorf("stat netns fd %d: %w", int(ns), err)
	}
	return st.Ino, nil
}
