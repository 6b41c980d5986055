package workloads

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/podns"
)

// A record names its namespace by a path, but knows it by its inode and
// netns cookie: a path can die while the namespace lives on (the process
// of a /proc/<pid>/ns/net path exits while the pod's other processes, or a
// bind mount, keep the netns), and can come to name another namespace (pid
// reuse). Only a namespace no process or mount holds is gone.

// openEnrolled opens the namespace r enrolled, wherever it is reachable
// now (openLive).
func (s *Store) openEnrolled(r *Record) (netns.NsHandle, error) {
	ns, _, _, err := s.openLive(r)
	return ns, err
}

// openLive opens the namespace r enrolled and returns the path it is
// reachable by now: r.Netns while that names it, else the path Find gives.
// An error wraps podns.ErrNotExist only when the namespace is gone (or,
// for a record without a cookie, when its path no longer names it, as
// nothing else can tell it from a new pod's), and podns.ErrHeldElsewhere
// when it lives only where the netns roots do not reach. replaced says
// r.Netns now names another namespace (errReplaced), whatever became of
// the one enrolled.
func (s *Store) openLive(r *Record) (ns netns.NsHandle, path string, replaced bool, err error) {
	ns, err = s.openByPath(r)
	replaced = errors.Is(err, errReplaced)
	if err == nil || !errors.Is(err, podns.ErrNotExist) || r.NetnsCookie == 0 {
		return ns, r.Netns, replaced, err
	}
	ns, path, ferr := s.opener.Find(r.NetnsInode, r.NetnsCookie)
	if ferr != nil {
		return netns.None(), "", replaced, fmt.Errorf("netns of %s (was %s): %w", r.Attachment, r.Netns, ferr)
	}
	return ns, path, replaced, nil
}

// openByPath opens r.Netns and reports it gone when the path now names
// another namespace than the one enrolled: another inode, or (for a
// /proc/<pid> path, which pid reuse can point at another pod whose netns
// took a freed inode) another cookie. An inode of 0 is unknown (a journal
// from before inodes were kept) and checks nothing.
func (s *Store) openByPath(r *Record) (netns.NsHandle, error) {
	ns, err := s.opener.Open(r.Netns)
	if err != nil || r.NetnsInode == 0 {
		return ns, err
	}
	got, err := inode(ns)
	if err != nil {
		ns.Close()
		return netns.None(), err
	}
	proc := strings.HasPrefix(r.Netns, "/proc/")
	if got != r.NetnsInode {
		ns.Close()
		why := errReplaced
		if proc {
			why = podns.ErrNotExist // pid reuse, or the process moved
		}
		return netns.None(), fmt.Errorf("netns %s is no longer the one enrolled (inode %d, was %d): %w", r.Netns, got, r.NetnsInode, why)
	}
	if r.NetnsCookie == 0 || !proc {
		return ns, nil
	}
	cookie, err := s.opener.Cookie(ns)
	if err != nil {
		ns.Close()
		return netns.None(), err
	}
	if cookie != r.NetnsCookie {
		ns.Close()
		return netns.None(), fmt.Errorf("netns %s is no longer the one enrolled (cookie %d, was %d): %w", r.Netns, cookie, r.NetnsCookie, podns.ErrNotExist)
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

// follow makes path r's netns path, on disk and in the listed record:
// ztunnel's snapshot, CHECK and the next reconcile open it there. The
// caller holds r's attachment lock.
func (s *Store) follow(r *Record, path string) error {
	r.Netns = path
	if err := s.writeRecord(r); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.recs[r.Attachment]; cur != nil {
		cur.Netns = path
	}
	return nil
}

// ztunnelNetns is the path ztunnel is to open r's netns by, which the
// snapshot hands it long after the ADD: where the namespace enrolled is
// reachable now, or "" when it is not (gone, out of reach, or the path
// names another pod's netns after pid reuse), which the ZDS server cannot
// open and so asks ztunnel to keep what it holds until the reconciler
// decides. Never a path that names another namespace.
func (s *Store) ztunnelNetns(r *Record) string {
	ns, path, _, err := s.openLive(r)
	if err != nil {
		s.log.Warn("netns not reachable for ztunnel's snapshot", "attachment", r.Attachment.String(), "err", err)
		return ""
	}
	ns.Close()
	return path
}
