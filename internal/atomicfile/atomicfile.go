// Package atomicfile replaces a file so that a reader, or a crash, sees the
// old file or the new one and never a part of either: the new bytes go to a
// temp file in the same directory, which is fsynced, given its mode, renamed
// over the old file, and the directory fsynced. The installer's files and
// the agent's journal are both written through it.
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Options say how Write names and finishes its temp file.
type Options struct {
	// TempPattern names the temp file in path's directory, as
	// os.CreateTemp's pattern: each caller picks one its readers ignore
	// and its own start-up recognises as a leftover of a crashed write.
	TempPattern string
	// Perm is the file's mode, set explicitly so the umask plays no part.
	Perm fs.FileMode
	// BeforeRename, when set, runs last before the rename: an error
	// abandons the write (the temp file is removed) and is returned as it
	// is. The installer re-checks there a file someone else owns, so their
	// concurrent write is never reverted.
	BeforeRename func() error
}

// Write publishes the bytes fill writes as path. The old file's inode is
// never opened for writing, so a binary being executed is replaced without
// ETXTBSY. Errors wrap the system's, so callers can test for ENOSPC or a
// missing directory (fs.ErrNotExist).
func Write(path string, fill func(io.Writer) error, o Options) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, o.TempPattern)
	if err != nil {
		return fmt.Errorf("create temp file for %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close() // a second close only errors
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := fill(tmp); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(o.Perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if o.BeforeRename != nil {
		if err := o.BeforeRename(); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	return SyncDir(dir)
}

// Bytes is a fill for Write that writes data, for bytes already in memory.
func Bytes(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
}

// SyncDir makes a rename or a removal in dir survive a crash. dir is
// opened as a directory only (a FIFO or a file put in its place fails at
// once instead of blocking or being synced), and as a plain descriptor: an
// os.File would first try it on the poller (five syscalls that fail on a
// directory), on every ADD and DEL of the agent's journal.
func SyncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open dir %s for fsync: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
