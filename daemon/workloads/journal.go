package workloads

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/internal/atomicfile"
)

// The journal is one JSON file per attachment in the state dir, written
// with temp+fsync+rename so a crash leaves either the old or the new record,
// never half of one. Neither a container id nor an ifname may contain ':'
// (CNI spec), so the file name is unambiguous.
const journalExt = ".json"

func journalName(a Attachment) string {
	return a.ContainerID + ":" + a.IfName + journalExt
}

// maxRecordBytes caps what is read of one journal file: a record is a few
// KiB; anything larger is not ours and is moved aside unread.
const maxRecordBytes = 1 << 20

// JournalError is a failure of the agent's own state dir, never the
// caller's: rpc answers it with a try-again or internal code.
type JournalError struct {
	Op  string // "write", "remove", "sync" (the state dir, after a removal)
	Err error
}

func (e *JournalError) Error() string { return e.Op + " journal: " + e.Err.Error() }
func (e *JournalError) Unwrap() error { return e.Err }

// Full reports a state dir out of space or quota: worth retrying later.
func (e *JournalError) Full() bool {
	return errors.Is(e.Err, unix.ENOSPC) || errors.Is(e.Err, unix.EDQUOT)
}

func journalErr(op string, err error) error { return &JournalError{Op: op, Err: err} }

func (s *Store) writeRecord(r *Record) error {
	// Compact: a record is read by the agent, and by people through jq.
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode journal record %s: %w", r.Attachment, err)
	}
	path := filepath.Join(s.dir, journalName(r.Attachment))
	err = atomicfile.Write(path, atomicfile.Bytes(b), journalFile)
	if errors.Is(err, os.ErrNotExist) {
		// Someone removed the state dir (it is on tmpfs, and cleanup
		// scripts exist): recreate it rather than fail every ADD. The
		// records it held are written again by the next Reconcile.
		s.log.Warn("state dir missing; recreating it", "dir", s.dir)
		if err = os.MkdirAll(s.dir, 0o700); err == nil {
			err = writeMarker(s.dir)
		}
		if err == nil {
			err = atomicfile.Write(path, atomicfile.Bytes(b), journalFile)
		}
	}
	if err != nil {
		return journalErr("write", fmt.Errorf("record %s: %w", r.Attachment, err))
	}
	return nil
}

// journalFile is how a record is written: loadJournal removes the temp
// files a crashed write leaves (".tmp-" names, never ".json").
var journalFile = atomicfile.Options{TempPattern: journalTempPrefix + "*", Perm: 0o600}

const journalTempPrefix = ".tmp-"

func (s *Store) deleteRecord(a Attachment) error {
	err := os.Remove(filepath.Join(s.dir, journalName(a)))
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(s.dir); errors.Is(derr, os.ErrNotExist) {
			return nil // no dir, no record
		}
		err = nil
	}
	if err != nil {
		return journalErr("remove", fmt.Errorf("record %s: %w", a, err))
	}
	return s.syncDir()
}

// hasRecord says whether a's journal file is there (the state dir may have
// been removed under the agent).
func (s *Store) hasRecord(a Attachment) bool {
	_, err := os.Lstat(filepath.Join(s.dir, journalName(a)))
	return !errors.Is(err, os.ErrNotExist)
}

func (s *Store) syncDir() error {
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return journalErr("sync", err)
	}
	return nil
}

// readRecordFile reads one journal file without following a link or
// blocking on a FIFO put in its place, and at most maxRecordBytes.
func readRecordFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRecordBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRecordBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxRecordBytes)
	}
	return b, nil
}

// loadJournal claims the state dir (ClaimDir) and reads every record.
// Leftover temp files of a crashed write are removed; a record that does not
// parse is moved aside (not deleted: an operator may want it) and reported.
// Files that are not the journal's are left alone.
func (s *Store) loadJournal() ([]*Record, error) {
	if err := ClaimDir(s.dir); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read state dir: %w", err)
	}
	var recs []*Record
	var foreign []string
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(s.dir, name)
		switch kindOf(e) {
		case tempFile:
			os.Remove(path)
			continue
		case notJournal:
			foreign = append(foreign, name)
			continue
		case recordFile:
		default:
			continue
		}
		r, err := readRecord(path, name)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed since the listing
		}
		if err != nil {
			s.log.Warn("journal record unreadable; moved aside", "file", name, "err", err)
			os.Rename(path, path+corruptExt)
			continue
		}
		if len(r.skippedIPs) > 0 {
			s.log.Warn("journal record holds IPs that do not parse; loaded without them", "file", name, "ips", r.skippedIPs)
		}
		recs = append(recs, r)
	}
	if len(foreign) > 0 {
		s.log.Warn("state dir holds files that are not the journal's; left alone", "dir", s.dir, "files", some(foreign))
	}
	return recs, nil
}
