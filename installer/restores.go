package installer

import (
	"log/slog"
	"slices"
	"time"
)

// A file restored more often than restoreWarnAfter times within
// restoreWindow is being fought over: something on the node (usually
// another CNI's installer) keeps rewriting it, and the operator should
// find and fix that rather than rely on us winning every round.
const (
	restoreWindow    = time.Minute
	restoreWarnAfter = 5
)

// restoreLog remembers recent restores per file.
type restoreLog map[string]*fileRestores

type fileRestores struct {
	recent   []restoreEvent
	warnedAt time.Time
}

type restoreEvent struct {
	at   time.Time
	what string
}

// record notes a restore of path and warns, at most once per window, when
// the file has been restored too often.
func (r restoreLog) record(log *slog.Logger, now time.Time, path, what string) {
	f := r[path]
	if f == nil {
		f = &fileRestores{}
		r[path] = f
	}
	f.recent = slices.DeleteFunc(append(f.recent, restoreEvent{now, what}), func(e restoreEvent) bool {
		return now.Sub(e.at) > restoreWindow
	})
	if len(f.recent) <= restoreWarnAfter || now.Sub(f.warnedAt) < restoreWindow {
		return
	}
	f.warnedAt = now
	var changes []string
	for _, e := range f.recent {
		if !slices.Contains(changes, e.what) {
			changes = append(changes, e.what)
		}
	}
	log.Warn("something keeps changing a file the installer owns; find what rewrites it",
		"path", path, "restores", len(f.recent), "window", restoreWindow, "changes", changes)
}
