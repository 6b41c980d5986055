package installer

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicemesh/sluice/internal/atomicfile"
)

// Temp files start with a dot and end in ".tmp", so no runtime mistakes a
// half-written conflist for a config (libcni only reads .conf, .conflist
// and .json) and stale ones are easy to recognise as ours.
const (
	tempPrefix = ".sluice-"
	tempSuffix = ".tmp"
)

// testHookBeforeRename, when set by a test, runs just before the rename
// that publishes path: the window in which another writer's change must
// not be lost.
var testHookBeforeRename func(path string)

// replaceFile publishes the bytes fill writes as path through atomicfile:
// readers see the old file or the new one, never a partial one and never
// none; a binary that is being executed is replaced without ETXTBSY.
//
// A non-nil precondition runs last, just before the rename: it re-checks a
// file someone else owns, so their concurrent write is never reverted.
func replaceFile(path string, perm fs.FileMode, fill func(io.Writer) error, precondition func() error) error {
	return atomicfile.Write(path, fill, atomicfile.Options{
		TempPattern: tempPrefix + filepath.Base(path) + "-*" + tempSuffix,
		Perm:        perm,
		BeforeRename: func() error {
			if testHookBeforeRename != nil {
				testHookBeforeRename(path)
			}
			if precondition != nil {
				return precondition()
			}
			return nil
		},
	})
}

// writeFile is replaceFile for bytes already in memory, for files the
// installer owns.
func writeFile(path string, data []byte, perm fs.FileMode) error {
	return replaceFile(path, perm, atomicfile.Bytes(data), nil)
}

// rewrite replaces the file prev was read from with data, keeping its mode,
// unless it changed since (errChanged).
func rewrite(prev snapshot, data []byte) error {
	return replaceFile(prev.path, prev.info.Mode().Perm(), atomicfile.Bytes(data), prev.unchanged)
}

// removeFile removes path and makes the removal durable. A file that is
// already gone is not an error.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}

// removeStaleTemps deletes temp files an earlier run left behind when it
// died between create and rename.
func removeStaleTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list %s for stale temp files: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if name := e.Name(); strings.HasPrefix(name, tempPrefix) && strings.HasSuffix(name, tempSuffix) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove stale temp file: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}
