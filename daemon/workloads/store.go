// Package workloads is the one place that knows what is enrolled: it applies
// and removes rulesets through redirect, keeps the journal on disk, and
// reconciles the kernel with it on start and on demand. ADD, DEL, CHECK, GC
// and the reconciler all go through it.
package workloads

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/podns"
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
	// ServiceAccount is the pod's, for ztunnel (ambient).
	ServiceAccount string        `json:"serviceAccount,omitempty"`
	Netns          string        `json:"netns"`
	IPs            []string      `json:"ips,omitempty"`
	Spec           redirect.Spec `json:"spec"`
	RulesetHash    string        `json:"rulesetHash"`
	EnrolledAt     time.Time     `json:"enrolledAt"`
	// NetnsInode identifies the namespace enrolled: a path can come to name
	// another one (a /proc/<pid> path after pid reuse), which must then be
	// treated as this one gone, never touched.
	NetnsInode uint64 `json:"netnsInode,omitempty"`
	// Late marks an enrolment the agent made for a pod found running
	// uncaptured, not a CNI ADD: the runtime never lists it as a valid
	// attachment, so GC leaves it to the reconciler.
	Late bool `json:"late,omitempty"`
}

// Store holds the enrolled workloads.
type Store struct {
	dir    string
	opener *podns.Opener
	log    *slog.Logger

	mu   sync.RWMutex
	recs map[Attachment]*Record

	repairs atomic.Int64
	// OnApply, when set before serving, observes each ruleset transaction.
	OnApply func(time.Duration)
	// Ambient, when set before serving, hands ambient pods to ztunnel.
	Ambient *Ambient
	// OnRepair, when set before serving, hears of each drift repair.
	OnRepair func(r Record, drift []string)

	// Calls for one container are serialised (a retried ADD racing its own
	// DEL must not interleave); calls for different ones run in parallel.
	stripes [64]sync.Mutex
}

// Open loads the journal in dir (created 0700 if missing). It does not touch
// the kernel; call Reconcile for that.
func Open(dir string, opener *podns.Opener, log *slog.Logger) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	s := &Store{dir: dir, opener: opener, log: log, recs: map[Attachment]*Record{}}
	recs, err := s.loadJournal()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		s.recs[r.Attachment] = r
	}
	return s, nil
}

func (s *Store) lock(a Attachment) func() {
	h := fnv.New32a()
	h.Write([]byte(a.ContainerID))
	m := &s.stripes[h.Sum32()%uint32(len(s.stripes))]
	m.Lock()
	return m.Unlock
}

// Enroll programs r.Spec into r.Netns and journals it. The record is written
// first, as intent: if the agent dies after the kernel change, the
// reconciler still knows the netns is ours. A retried Enroll converges.
func (s *Store) Enroll(ctx context.Context, r Record) error {
	rs, err := redirect.Build(r.Spec)
	if err != nil {
		return fmt.Errorf("build ruleset for %s: %w", r.Attachment, err)
	}
	defer s.lock(r.Attachment)()
	ns, err := s.opener.Open(r.Netns)
	if err != nil {
		return err
	}
	defer ns.Close()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("enroll %s: %w", r.Attachment, err)
	}
	r.RulesetHash = rs.Hash()
	if r.NetnsInode, err = inode(ns); err != nil {
		return fmt.Errorf("enroll %s: %w", r.Attachment, err)
	}
	if r.EnrolledAt.IsZero() {
		r.EnrolledAt = time.Now().UTC().Truncate(time.Second)
	}
	if err := s.writeRecord(&r); err != nil {
		return err
	}
	if err := s.apply(ns, rs); err != nil {
		s.forget(r.Attachment)
		return fmt.Errorf("apply ruleset to %s (netns %s): %w", r.Attachment, r.Netns, err)
	}
	s.mu.Lock()
	s.recs[r.Attachment] = &r
	s.mu.Unlock()
	if !isAmbient(&r) {
		return nil
	}
	if err := s.handOver(ctx, &r); err != nil {
		// All or nothing: an ambient pod without ztunnel is a black hole.
		s.mu.Lock()
		delete(s.recs, r.Attachment)
		s.mu.Unlock()
		cleanup := errors.Join(s.takeBack(context.WithoutCancel(ctx), &r), redirect.Remove(ns))
		s.forget(r.Attachment)
		if cleanup != nil {
			s.log.Error("rolling back a failed ambient enrolment", "attachment", r.Attachment.String(), "err", cleanup)
		}
		return err
	}
	return nil
}

func (s *Store) apply(ns netns.NsHandle, rs *redirect.Ruleset) error {
	start := time.Now()
	err := redirect.Apply(ns, rs)
	if s.OnApply != nil {
		s.OnApply(time.Since(start))
	}
	return err
}

// CountByMode counts enrolled workloads by capture mode.
func (s *Store) CountByMode() map[string]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]int{}
	for _, r := range s.recs {
		out[string(r.Spec.Mode)]++
	}
	return out
}

// forget drops a record whose kernel state failed to apply.
func (s *Store) forget(a Attachment) {
	if err := s.deleteRecord(a); err != nil {
		s.log.Error("journal cleanup after failed apply", "attachment", a.String(), "err", err)
	}
}

// Release removes the attachment's ruleset and record. A netns that is gone
// and an attachment we never knew are both fine: DEL must not block
// teardown. netnsPath, when given, is used if there is no record (the agent
// died between applying and journaling, or the journal was lost).
func (s *Store) Release(ctx context.Context, a Attachment, netnsPath string) error {
	defer s.lock(a)()
	s.mu.RLock()
	r := s.recs[a]
	s.mu.RUnlock()
	if r != nil {
		if isAmbient(r) {
			if err := s.takeBack(ctx, r); err != nil {
				return fmt.Errorf("release %s: %w", a, err)
			}
		}
		if err := s.removeTable(r.Netns, r.NetnsInode); err != nil {
			return fmt.Errorf("release %s: %w", a, err)
		}
	} else if netnsPath != "" {
		if err := s.removeTable(netnsPath, 0); err != nil {
			return fmt.Errorf("release %s: %w", a, err)
		}
	}
	if err := s.deleteRecord(a); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.recs, a)
	s.mu.Unlock()
	return nil
}

func (s *Store) removeTable(netnsPath string, ino uint64) error {
	ns, err := s.openEnrolled(netnsPath, ino)
	if errors.Is(err, podns.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer ns.Close()
	return redirect.Remove(ns)
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
	ns, err := s.opener.Open(netnsPath)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	kernel, err := redirect.Verify(ns, rs)
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", a, err)
	}
	return append(drift, kernel...), nil
}

// GC releases every attachment of ours that is not in valid; late
// enrolments are not the runtime's to list.
func (s *Store) GC(ctx context.Context, valid []Attachment) ([]Attachment, error) {
	var stale []Attachment
	for _, r := range s.List() {
		if !r.Late && !slices.Contains(valid, r.Attachment) {
			stale = append(stale, r.Attachment)
		}
	}
	var errs []error
	var removed []Attachment
	for _, a := range stale {
		if err := s.Release(ctx, a, ""); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, a)
	}
	return removed, errors.Join(errs...)
}

// List returns the enrolled records sorted by attachment.
func (s *Store) List() []Record {
	s.mu.RLock()
	out := make([]Record, 0, len(s.recs))
	for _, r := range s.recs {
		out = append(out, *r)
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b Record) int {
		return strings.Compare(a.Attachment.String(), b.Attachment.String())
	})
	return out
}

// Get returns one record. An empty ifName matches the container's first.
func (s *Store) Get(a Attachment) (Record, bool) {
	for _, r := range s.List() {
		if r.ContainerID == a.ContainerID && (a.IfName == "" || r.IfName == a.IfName) {
			return r, true
		}
	}
	return Record{}, false
}

// Verify reads the kernel state of an enrolled attachment now.
func (s *Store) Verify(r Record) ([]string, error) {
	rs, err := redirect.Build(r.Spec)
	if err != nil {
		return nil, err
	}
	ns, err := s.openEnrolled(r.Netns, r.NetnsInode)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	return redirect.Verify(ns, rs)
}

// Reconcile brings the kernel in line with the journal: records whose netns
// is gone are dropped; the rest are verified and re-applied on drift.
func (s *Store) Reconcile(ctx context.Context) error {
	var errs []error
	for _, r := range s.List() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.reconcileOne(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Store) reconcileOne(r Record) error {
	defer s.lock(r.Attachment)()
	ns, err := s.openEnrolled(r.Netns, r.NetnsInode)
	if errors.Is(err, podns.ErrNotExist) {
		s.log.Info("netns gone; dropping workload", "attachment", r.Attachment.String(), "netns", r.Netns)
		if isAmbient(&r) {
			if err := s.takeBack(context.Background(), &r); err != nil {
				return fmt.Errorf("drop %s: %w", r.Attachment, err)
			}
		}
		if err := s.deleteRecord(r.Attachment); err != nil {
			return err
		}
		s.mu.Lock()
		delete(s.recs, r.Attachment)
		s.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", r.Attachment, err)
	}
	defer ns.Close()
	if isAmbient(&r) && s.Ambient != nil {
		// The host table may have been recreated empty (an uninstall and a
		// reinstall, a reboot of the agent's host netns in tests).
		if err := redirect.AddHostIPs(s.Ambient.Host, podAddrs(&r)...); err != nil {
			return fmt.Errorf("reconcile %s: host probe table: %w", r.Attachment, err)
		}
	}
	return s.repair(ns, r)
}

func (s *Store) repair(ns netns.NsHandle, r Record) error {
	rs, err := redirect.Build(r.Spec)
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", r.Attachment, err)
	}
	drift, err := redirect.Verify(ns, rs)
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", r.Attachment, err)
	}
	if len(drift) == 0 {
		return nil
	}
	s.log.Warn("ruleset drifted; re-applying", "attachment", r.Attachment.String(), "drift", drift)
	if err := s.apply(ns, rs); err != nil {
		return fmt.Errorf("repair %s: %w", r.Attachment, err)
	}
	s.repairs.Add(1)
	if s.OnRepair != nil {
		s.OnRepair(r, drift)
	}
	return nil
}

// Repairs counts rulesets re-applied because the kernel drifted.
func (s *Store) Repairs() int64 { return s.repairs.Load() }

// Resync reconciles every interval until ctx ends, so a table someone
// flushed or edited is restored without waiting for a CNI call.
func (s *Store) Resync(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("resync left errors", "err", err)
			}
		}
	}
}

// openEnrolled opens an enrolled netns by path, and reports it gone when the
// path now names another namespace than the one enrolled (ino; 0 = unknown,
// a journal from before inodes were recorded).
func (s *Store) openEnrolled(path string, ino uint64) (netns.NsHandle, error) {
	ns, err := s.opener.Open(path)
	if err != nil || ino == 0 {
		return ns, err
	}
	got, err := inode(ns)
	if err != nil {
		ns.Close()
		return netns.None(), err
	}
	if got != ino {
		ns.Close()
		return netns.None(), fmt.Errorf("netns %s is no longer the one enrolled (inode %d, was %d): %w", path, got, ino, podns.ErrNotExist)
	}
	return ns, nil
}

func inode(ns netns.NsHandle) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(ns), &st); err != nil {
		return 0, fmt.Errorf("stat netns: %w", err)
	}
	return st.Ino, nil
}
