package workloads

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The journal is one JSON file per attachment in the state dir, written
// with temp+fsync+rename so a crash leaves either the old or the new record,
// never half of one. Neither a container id nor an ifname may contain ':'
// (CNI spec), so the file name is unambiguous.
const journalExt = ".json"

func journalName(a Attachment) string {
	return a.ContainerID + ":" + a.IfName + journalExt
}

func (s *Store) writeRecord(r *Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode journal record %s: %w", r.Attachment, err)
	}
	path := filepath.Join(s.dir, journalName(r.Attachment))
	tmp, err := os.CreateTemp(s.dir, ".tmp-")
	if err != nil {
		return fmt.Errorf("write journal record %s: %w", r.Attachment, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write journal record %s: %w", r.Attachment, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync journal record %s: %w", r.Attachment, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close journal record %s: %w", r.Attachment, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("commit journal record %s: %w", r.Attachment, err)
	}
	return s.syncDir()
}

func (s *Store) deleteRecord(a Attachment) error {
	err := os.Remove(filepath.Join(s.dir, journalName(a)))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove journal record %s: %w", a, err)
	}
	return s.syncDir()
}

func (s *Store) syncDir() error {
	d, err := os.Open(s.dir)
	if err != nil {
		return fmt.Errorf("sync state dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync state dir %s: %w", s.dir, err)
	}
	return nil
}

// loadJournal reads every record. Leftover temp files of a crashed write are
// removed; a record that does not parse is moved aside (not deleted: an
// operator may want it) and reported.
func (s *Store) loadJournal() ([]*Record, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read state dir: %w", err)
	}
	var recs []*Record
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(s.dir, name)
		switch {
		case strings.HasPrefix(name, ".tmp-"):
			os.Remove(path)
			continue
		case !strings.HasSuffix(name, journalExt) || !e.Type().IsRegular():
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read journal record %s: %w", name, err)
		}
		r := &Record{}
		if err := json.Unmarshal(b, r); err != nil || journalName(r.Attachment) != name {
			s.log.Warn("journal record unreadable; moved aside", "file", name, "err", err)
			os.Rename(path, path+".corrupt")
			continue
		}
		recs = append(recs, r)
	}
	return recs, nil
}
