package installer

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// maxConfSize caps what the installer reads of one config. Real conflists
// are a few KiB; reading a huge one whole on every resync would cost the
// agent its memory, and no runtime should be handed it either.
const maxConfSize = 1 << 20

// errChanged says a file changed between the installer's read and its
// rename, so the edit was dropped to keep the other writer's bytes.
var errChanged = errors.New("changed by another writer while being edited")

// snapshot is a config file as read: its bytes, and the identity that the
// compare-before-rename checks.
type snapshot struct {
	path string
	data []byte
	info fs.FileInfo
	sum  [32]byte
}

// readConf reads a config the way a file the installer does not own must
// be read: a symbolic link is refused, not followed (the file is managed
// elsewhere, and replacing the link or writing through it would both be
// wrong); a FIFO or device is refused without a blocking open; and no more
// than maxConfSize bytes are read.
func readConf(path string) (snapshot, error) {
	s := snapshot{path: path}
	fi, err := os.Lstat(path)
	if err != nil {
		return s, err
	}
	if fi.Mode().Type() == fs.ModeSymlink {
		target, _ := os.Readlink(path)
		return s, fmt.Errorf("%s is a symbolic link (to %s); the installer edits only regular files: point --cni-conf-name at a regular file or replace the link", path, target)
	}
	if !fi.Mode().IsRegular() {
		return s, fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	// O_NONBLOCK and O_NOFOLLOW: the path may have been swapped for a FIFO
	// or a link since the Lstat; fstat below sees what was really opened.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return s, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	if s.info, err = f.Stat(); err != nil {
		return s, fmt.Errorf("stat %s: %w", path, err)
	}
	if !s.info.Mode().IsRegular() {
		return s, fmt.Errorf("%s is not a regular file (%s)", path, s.info.Mode().Type())
	}
	if s.info.Size() > maxConfSize {
		return s, fmt.Errorf("%s is larger than the %d bytes a CNI config may be (%d bytes); not read", path, maxConfSize, s.info.Size())
	}
	if s.data, err = io.ReadAll(io.LimitReader(f, maxConfSize+1)); err != nil {
		return s, fmt.Errorf("read %s: %w", path, err)
	}
	if len(s.data) > maxConfSize {
		return s, fmt.Errorf("%s is larger than the %d bytes a CNI config may be; not read", path, maxConfSize)
	}
	s.sum = sha256.Sum256(s.data)
	return s, nil
}

// unchanged is the compare-before-rename: it fails with errChanged unless
// the file at s.path is still the inode s read, with the same bytes. An
// in-place write keeps the inode and changes the bytes; a rename by
// another installer changes the inode.
func (s snapshot) unchanged() error {
	now, err := readConf(s.path)
	if err != nil {
		return fmt.Errorf("%s %w: %w", s.path, errChanged, err)
	}
	if !os.SameFile(now.info, s.info) || now.sum != s.sum {
		return fmt.Errorf("%s %w", s.path, errChanged)
	}
	return nil
}
