package installer

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// replaceFile publishes the bytes fill writes as path: temp file in the same
// directory, fsync, chmod, rename over the old file, fsync the directory.
// Readers see the old file or the new one, never a partial one and never
// none; a binary that is being executed is replaced without ETXTBSY because
// its inode is never opened for writing.
//
// A non-nil precondition runs last, just before the rename: it re-checks a
// file someone else owns, so their concurrent write is never reverted.
func replaceFile(path string, perm fs.FileMode, fill func(io.Writer) error, precondition func() error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, tempPrefix+filepath.Base(path)+"-*"+tempSuffix)
	if err != nil {
		return fmt.Errorf("create temp file for %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := fill(tmp); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	// CreateTemp makes 0600 files; chmod explicitly so the umask plays no part.
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if testHookBeforeRename != nil {
		testHookBeforeRename(path)
	}
	if precondition != nil {
		if err := precondition(); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	return syncDir(dir)
}

// writeFile is replaceFile for bytes already in memory, for files the
// installer owns.
func writeFile(path string, data []byte, perm fs.FileMode) error {
	return replaceFile(path, perm, writeBytes(data), nil)
}

// rewrite replaces the file prev was read from with data, keeping its mode,
// unless it changed since (errChanged).
func rewrite(prev snapshot, data []byte) error {
	return replaceFile(prev.path, prev.info.Mode().Perm(), writeBytes(data), prev.unchanged)
}

func writeBytes(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
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
	return syncDir(filepath.Dir(path))
}

// syncDir makes a rename or removal in dir survive a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
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
