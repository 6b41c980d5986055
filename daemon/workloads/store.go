// Package workloads is the one place that knows what is enrolled: it applies
// and removes rulesets through redirect, keeps the journal on disk, and
// reconciles the kernel with it on start and on demand. ADD, DEL, CHECK, GC
// and the reconciler all go through it.
//
// The journal is one compact JSON file per attachment,
// <containerID>:<ifName>.json (neither part may contain ':'), written
// through internal/atomicfile (temp, fsync, rename, fsync dir). Files are
// read with O_NOFOLLOW|O_NONBLOCK, only if regular, at most 1 MiB;
// anything unreadable is moved aside as .corrupt (container_id is at most
// 226 bytes so that name fits 255). A missing state dir is recreated on
// the next write (any step's fs.ErrNotExist). Record.IPs is
// []netip.Prefix, journaled as text: an older record's bare address loads
// as a host prefix, and a value that is neither is left out with a warning.
//
// A netns is known by its inode and its netns cookie (SO_NETNS_COOKIE,
// Linux 5.14), which is never reused. When a record's path is gone or
// names another namespace, the reconciler, DEL and GC look for the
// namespace among live processes and nsfs mounts and follow the one whose
// cookie matches, rewriting and journaling the path; alive only outside
// --netns-roots, it is kept but not reasserted, and DEL releases it and
// leaves the table. Records without a cookie keep the path rule. "Is
// another record on this netns?" and the apply or removal hold a
// per-inode lock; calls for one container hold one of 64 stripes, taken
// only after the netns is open. A rollback restores the previous record
// and its ruleset, or a sibling's, or nothing of sluice's, and drops only
// probe addresses no other record holds.
//
// The periodic resync verifies records in groups at least 250 ms apart
// over half the interval, each record still once per interval.
package workloads

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// Attachment is one CNI attachment: a container's interface.
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

func (a Attachment) String() string { return a.ContainerID + "/" + a.IfName }

// Record is one enrolled attachment, as journaled.
type Record struct {
	Attachment
	PodNamespace string `json:"podNamespace,omitempty"`
	PodName      string `json:"podName,omitempty"`
	PodUID       string `json:"podUID,omitempty"`
	// Network is the CNI network name of the ADD (the conflist's name):
	// GC is scoped to it. Empty in records of agents before it was kept.
	Network string `json:"network,omitempty"`
	// ServiceAccount is the pod's, for ztunnel (ambient).
	ServiceAccount string `json:"serviceAccount,omitempty"`
	Netns          string `json:"netns"`
	// IPs are the attachment's addresses with their prefix lengths, as
	// the CNI result gives them (a host prefix when only an address was
	// known). The journal holds them as text ("10.1.0.5/24").
	IPs         []netip.Prefix `json:"ips,omitempty"`
	Spec        redirect.Spec  `json:"spec"`
	RulesetHash string         `json:"rulesetHash"`
	EnrolledAt  time.Time      `json:"enrolledAt"`
	// NetnsInode identifies the namespace enrolled: a path can come to name
	// another one (a /proc/<pid> path after pid reuse), which must then be
	// treated as this one gone, never touched.
	NetnsInode uint64 `json:"netnsInode,omitempty"`
	// NetnsCookie is the namespace's netns cookie, which the kernel never
	// reuses (an inode it does): with it, a namespace whose path has gone
	// can be found again and known for this one (netnsid.go). 0: unknown.
	NetnsCookie uint64 `json:"netnsCookie,omitempty"`
	// Late marks an enrolment the agent made for a pod found running
	// uncaptured, not a CNI ADD: the runtime never lists it as a valid
	// attachment, so GC leaves it to the reconciler.
	Late bool `json:"late,omitempty"`
	// NFTGen is the netns's nftables generation at which its table was
	// last known to be exactly this ruleset: the Apply's commit, or a
	// verify that found no drift. While it is unchanged a verify need not
	// read the table back (redirect.Kernel.VerifySince). 0: unknown.
	NFTGen redirect.Gen `json:"nftGen,omitempty"`
	// genPending says the journal does not hold NFTGen yet: Apply learns
	// it after the record is written; the next verify writes it.
	genPending bool

	// skippedIPs are values an old journal record held that are no
	// address (recordjson.go); loadJournal warns about them.
	skippedIPs []string
}

// Store holds the enrolled workloads. Everything it works with is handed
// to Open in a Config (config.go); no field is set after that.
type Store struct {
	dir        string
	opener     NetnsOpener
	kernel     redirect.Kernel
	log        *slog.Logger
	onApply    func(time.Duration)
	onReassert func(r Record, drift []string)
	onReplaced func(r Record, followed string)
	ambient    *Ambient

	mu   sync.RWMutex
	recs map[Attachment]*Record

	reasserts atomic.Int64
	restored  labelCounts
	replaced  labelCounts

	// released holds attachments whose kernel state is gone but whose
	// journal record could not be deleted: they are never reasserted, and
	// the delete is retried on each Reconcile.
	released map[Attachment]bool

	// Calls for one container are serialised (a retried ADD racing its own
	// DEL must not interleave); calls for different ones run in parallel.
	stripes [64]sync.Mutex
	// nsStripes (by netns inode) make "is another attachment in this
	// netns?" and the apply or removal that follows one step; podStripes
	// (by pod uid) do the same for "is another attachment of this pod
	// enrolled?" and ztunnel's Add or Del; hostMu for the host probe set.
	nsStripes  [64]sync.Mutex
	podStripes [64]sync.Mutex
	hostMu     sync.Mutex
}

func (s *Store) lock(a Attachment) func() { return lockStripe(&s.stripes, a.ContainerID) }

func lockStripe(stripes *[64]sync.Mutex, key string) func() {
	h := fnv.New32a()
	h.Write([]byte(key))
	m := &stripes[h.Sum32()%uint32(len(stripes))]
	m.Lock()
	return m.Unlock
}

func (s *Store) lockNetns(ino uint64) func() {
	return lockStripe(&s.nsStripes, strconv.FormatUint(ino, 10))
}

// Enroll programs r.Spec into r.Netns and journals it. The record is written
// first, as intent: if the agent dies after the kernel change, the
// reconciler still knows the netns is ours. A retried Enroll converges; one
// into another netns moves the attachment, and the netns it leaves loses
// the table unless another attachment still owns it there. A failure
// leaves the netns and the journal as they were before the call.
//
// An ambient r that finds no ztunnel connected fails at once with
// ErrZtunnel: background enrolments retry through their work queues.
func (s *Store) Enroll(ctx context.Context, r Record) error {
	if isAmbient(&r) {
		return s.enrollAmbient(ctx, r, false)
	}
	return s.enroll(ctx, r)
}

// EnrollAmbient is Enroll of an ambient r for ambientmesh, which owns the
// order around it. With wait (a CNI ADD) an r that finds no ztunnel
// connected waits for one (the ztunnel server's ConnectWait, within ctx)
// before it takes any lock, rather than fail into the kubelet's backoff.
func (s *Store) EnrollAmbient(ctx context.Context, r Record, wait bool) error {
	if isAmbient(&r) {
		return s.enrollAmbient(ctx, r, wait)
	}
	return s.enroll(ctx, r)
}

// AwaitZtunnel waits, as an ambient ADD's enrolment does, until a ztunnel
// is connected for r (the ztunnel server's ConnectWait, within ctx), and
// takes no lock: for ambientmesh, whose ADD waits before it takes one of
// the agent's ADD slots.
func (s *Store) AwaitZtunnel(ctx context.Context, r Record) error {
	return s.awaitZtunnel(ctx, &r)
}

// enroll is one Enroll under r's attachment lock; traced as a step of the
// call in ctx, with the kernel's apply a step of its own.
func (s *Store) enroll(ctx context.Context, r Record) (err error) {
	ctx, span := tracer.Start(ctx, "workloads.enroll")
	defer func() { endSpan(span, err) }()
	e, err := s.start(ctx, &r)
	if err != nil {
		return err
	}
	defer e.close()
	_, apply := tracer.Start(ctx, "nftables.apply")
	err = s.commit(e, &r)
	endSpan(apply, err)
	if err != nil {
		return err
	}
	if isAmbient(&r) {
		if err := s.handOver(ctx, &r); err != nil {
			// All or nothing: an ambient pod without ztunnel is a black
			// hole; and nothing less than what was there: a re-ADD keeps
			// the capture it had.
			return s.rollBack(context.WithoutCancel(ctx), e.ns, &r, e.prev, err)
		}
	}
	// Only now: a hand-over that fails must find the netns it left as it was.
	s.releaseLeft(ctx, e.prev, &r)
	return nil
}

// enrolment is an Enroll or a TakeOver in progress, under its attachment's
// lock.
type enrolment struct {
	rs     *redirect.Ruleset
	ns     netns.NsHandle
	prev   *Record // the attachment's record before the call, or nil
	unlock func()
}

func (e *enrolment) close() {
	e.unlock()
	e.ns.Close()
}

// start builds r's ruleset and opens its netns before any lock, within the
// call's deadline (nothing unbounded runs while a stripe is held), then
// takes r's lock and stamps r.
func (s *Store) start(ctx context.Context, r *Record) (*enrolment, error) {
	rs, err := redirect.Build(r.Spec)
	if err != nil {
		return nil, fmt.Errorf("build ruleset for %s: %w", r.Attachment, err)
	}
	ns, err := s.opener.OpenContext(ctx, r.Netns)
	if err != nil {
		return nil, err
	}
	e := &enrolment{rs: rs, ns: ns, unlock: s.lock(r.Attachment)}
	if err := s.stamp(ctx, r, rs, ns); err != nil {
		e.close()
		return nil, err
	}
	s.mu.RLock()
	e.prev = s.recs[r.Attachment]
	s.mu.RUnlock()
	return e, nil
}

// commit journals r as intent, then applies its ruleset and lists it; a
// failed apply puts back the earlier record, or none.
func (s *Store) commit(e *enrolment, r *Record) error {
	if err := s.writeRecord(r); err != nil {
		return err
	}
	if err := s.applyListed(e.ns, e.rs, r); err != nil {
		s.restore(r.Attachment, e.prev)
		return err
	}
	return nil
}

// stamp fills in what the store computes of r, under r's lock.
func (s *Store) stamp(ctx context.Context, r *Record, rs *redirect.Ruleset, ns netns.NsHandle) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("enroll %s: %w", r.Attachment, err)
	}
	r.RulesetHash = rs.Hash()
	var err error
	if r.NetnsInode, err = inode(ns); err != nil {
		return fmt.Errorf("enroll %s: %w", r.Attachment, err)
	}
	if r.NetnsCookie, err = s.opener.Cookie(ns); err != nil {
		return fmt.Errorf("enroll %s: %w", r.Attachment, err)
	}
	if r.EnrolledAt.IsZero() {
		r.EnrolledAt = time.Now().UTC().Truncate(time.Second)
	}
	r.NFTGen, r.genPending = 0, false
	return nil
}

// applyListed applies rs to ns and lists r, one step under the netns's
// lock; r's record is already written.
func (s *Store) applyListed(ns netns.NsHandle, rs *redirect.Ruleset, r *Record) error {
	defer s.lockNetns(r.NetnsInode)()
	gen, err := s.apply(ns, rs)
	if err != nil {
		return fmt.Errorf("apply ruleset to %s (netns %s): %w", r.Attachment, r.Netns, err)
	}
	r.NFTGen, r.genPending = gen, true
	s.mu.Lock()
	s.recs[r.Attachment] = r
	delete(s.released, r.Attachment)
	s.mu.Unlock()
	return nil
}

// releaseLeft lets go of the netns a re-enrolled attachment moved out of:
// its table goes unless another attachment still owns it there.
func (s *Store) releaseLeft(ctx context.Context, prev, r *Record) {
	if prev == nil || sameNetns(prev, r) {
		return
	}
	s.log.Info("attachment moved to another netns; releasing the old one", "attachment", r.Attachment.String(),
		"from", prev.Netns, "to", r.Netns)
	if err := s.letGo(ctx, prev); err != nil {
		s.log.Error("releasing the netns an attachment left", "attachment", r.Attachment.String(), "netns", prev.Netns, "err", err)
	}
}

func (s *Store) apply(ns netns.NsHandle, rs *redirect.Ruleset) (redirect.Gen, error) {
	start := time.Now()
	gen, err := s.kernel.Apply(redirect.Netns(ns), rs)
	if s.onApply != nil {
		s.onApply(time.Since(start))
	}
	return gen, err
}

func (s *Store) forget(a Attachment) {
	if err := s.deleteRecord(a); err != nil {
		s.log.Error("journal cleanup after failed apply", "attachment", a.String(), "err", err)
	}
}

// restore puts back the journal as it was before a failed Enroll: the
// earlier enrolment (whose table an atomic apply left intact), or nothing.
func (s *Store) restore(a Attachment, prev *Record) {
	if prev == nil {
		s.forget(a)
		return
	}
	if err := s.writeRecord(prev); err != nil {
		s.log.Error("journal restore after failed apply", "attachment", a.String(), "err", err)
	}
}

// Check compares the kernel's ruleset in netnsPath with what spec asks for,
// returning the differences (empty when in sync).
func (s *Store) Check(ctx context.Context, a Attachment, netnsPath string, spec redirect.Spec) ([]string, error) {
	rs, err := redirect.Build(spec)
	if err != nil {
		return nil, fmt.Errorf("build ruleset for %s: %w", a, err)
	}
	var drift []string
	s.mu.RLock()
	r := s.recs[a]
	s.mu.RUnlock()
	if r == nil {
		drift = append(drift, fmt.Sprintf("attachment %s is not enrolled", a))
	} else if r.Netns != netnsPath {
		drift = append(drift, fmt.Sprintf("enrolled in netns %s, runtime says %s", r.Netns, netnsPath))
	}
	ns, err := s.opener.OpenContext(ctx, netnsPath)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	kernel, err := s.kernel.Verify(redirect.Netns(ns), rs)
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", a, err)
	}
	return append(drift, kernel...), nil
}

// Verify reads the kernel state of an enrolled attachment now.
func (s *Store) Verify(r Record) ([]string, error) {
	rs, err := redirect.Build(r.Spec)
	if err != nil {
		return nil, err
	}
	ns, err := s.openEnrolled(&r)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	return s.kernel.Verify(redirect.Netns(ns), rs)
}
