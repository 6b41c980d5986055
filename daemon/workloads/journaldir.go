package workloads

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicemesh/sluice/internal/atomicfile"
)

// A state dir is the journal's when it holds stateMarker, which the agent
// writes when it first claims the dir. A dir without it is claimed only
// when everything in it is a file the journal writes: an earlier agent's
// dir (before the marker) or an empty one (the chart's hostPath, which the
// kubelet makes). Anything else means --state-dir names someone else's
// directory (a mistyped flag), and the agent refuses it rather than move
// its .json files aside or let cleanup delete them. Once claimed, a file
// someone else puts there is left alone and does not stop the agent: a
// stray file must not keep a node's pods from starting.
const stateMarker = ".sluice-state"

const markerText = "sluice-agent's state dir (its journal). sluice-agent cleanup removes the journal's files, this one last, and the dir once empty.\n"

// corruptExt is appended to a record moved aside unread.
const corruptExt = ".corrupt"

type journalKind int

const (
	notJournal  journalKind = iota
	recordFile              // <container id>:<ifname>.json
	corruptFile             // a record moved aside
	tempFile                // a crashed write's leftover
	markerFile
)

// kindOf says which of the journal's files e is; only regular files are
// the journal's.
func kindOf(e os.DirEntry) journalKind {
	name := e.Name()
	switch {
	case !e.Type().IsRegular():
		return notJournal
	case name == stateMarker:
		return markerFile
	case isTempName(name):
		return tempFile
	case isRecordName(name):
		return recordFile
	case strings.HasSuffix(name, journalExt+corruptExt):
		// Agents before the marker moved any unparseable .json aside,
		// whatever its name: an upgraded agent must still claim its dir.
		return corruptFile
	}
	return notJournal
}

// isTempName is the name os.CreateTemp gives journalFile's pattern: the
// prefix and a random decimal number, nothing another program's temp file
// is likely to be called.
func isTempName(name string) bool {
	digits, ok := strings.CutPrefix(name, journalTempPrefix)
	return ok && digits != "" && strings.Trim(digits, "0123456789") == ""
}

// isRecordName is journalName's shape: neither a container id nor an
// ifname is empty or holds ':' (CNI spec).
func isRecordName(name string) bool {
	stem, ok := strings.CutSuffix(name, journalExt)
	id, ifName, found := strings.Cut(stem, ":")
	return ok && found && id != "" && ifName != "" && !strings.Contains(ifName, ":")
}

// ClaimDir makes dir the journal's, or refuses it: a dir holding the marker
// is the journal's; one holding only the journal's files (or nothing) is
// claimed by writing the marker; any other is refused, untouched.
func ClaimDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read state dir: %w", err)
	}
	var foreign []string
	for _, e := range ents {
		switch kindOf(e) {
		case markerFile:
			return nil
		case notJournal:
			foreign = append(foreign, e.Name())
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("state dir %s holds %s, which sluice did not write, and no %s: it is not sluice's; refusing it (name a directory of the agent's own, or an empty one)",
			dir, some(foreign), stateMarker)
	}
	return writeMarker(dir)
}

func writeMarker(dir string) error {
	if err := atomicfile.Write(filepath.Join(dir, stateMarker), atomicfile.Bytes([]byte(markerText)), journalFile); err != nil {
		return journalErr("write", fmt.Errorf("state dir marker: %w", err))
	}
	return nil
}

// some quotes the first few names and counts the rest.
func some(names []string) string {
	const shown = 3
	q := make([]string, 0, shown)
	for _, n := range names[:min(len(names), shown)] {
		q = append(q, fmt.Sprintf("%q", n))
	}
	if len(names) > shown {
		return fmt.Sprintf("%s and %d more", strings.Join(q, ", "), len(names)-shown)
	}
	return strings.Join(q, ", ")
}

// RemoveJournal removes the journal's files from a claimed dir, for
// cleanup with the agent stopped: records that parse, records moved aside,
// temp files, and the marker last, only when nothing else is left. It
// returns the names it left: files someone else put there, and records
// that do not parse (moved aside by Open; one that appeared since is not
// taken for ours).
func RemoveJournal(dir string) (left []string, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read state dir: %w", err)
	}
	if !slices.ContainsFunc(ents, func(e os.DirEntry) bool { return kindOf(e) == markerFile }) {
		return nil, fmt.Errorf("state dir %s has no %s: not claimed, so nothing in it is removed", dir, stateMarker)
	}
	var errs []error
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		kind := kindOf(e)
		if kind == recordFile {
			if _, err := readRecord(path, e.Name()); err != nil {
				kind = notJournal
			}
		}
		switch kind {
		case markerFile:
		case notJournal:
			left = append(left, e.Name())
		default:
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if len(left) == 0 && len(errs) == 0 {
		errs = append(errs, os.Remove(filepath.Join(dir, stateMarker)))
	}
	return left, errors.Join(errs...)
}

// readRecord reads the record at path, named name, or says why it is not
// one.
func readRecord(path, name string) (r *Record, err error) {
	b, err := readRecordFile(path)
	if err != nil {
		return nil, err
	}
	r = &Record{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, err
	}
	if journalName(r.Attachment) != name {
		return nil, fmt.Errorf("names %s, not %s", journalName(r.Attachment), name)
	}
	return r, nil
}
