package sockfile

import (
	"fmt"
	"os"
	"syscall"
)

// Stamp identifies the socket file a listener created, so a daemon can tell
// when its path has been removed or now names someone else's socket: then
// nobody can reach it there any more.
type Stamp struct {
	path     string
	dev, ino uint64
}

// NewStamp records the file at path now.
func NewStamp(path string) (Stamp, error) {
	dev, ino, err := ident(path)
	if err != nil {
		return Stamp{}, fmt.Errorf("stamp socket %s: %w", path, err)
	}
	return Stamp{path, dev, ino}, nil
}

// Check fails when the path no longer names the stamped socket.
func (s Stamp) Check() error {
	dev, ino, err := ident(s.path)
	if err != nil {
		return fmt.Errorf("socket %s is not ours any more: %w", s.path, err)
	}
	if dev != s.dev || ino != s.ino {
		return fmt.Errorf("socket %s is not ours any more: replaced by another file (inode %d, ours %d)", s.path, ino, s.ino)
	}
	return nil
}

func ident(path string) (dev, ino uint64, err error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fmt.Errorf("%s: no inode information", path)
	}
	return st.Dev, st.Ino, nil
}
