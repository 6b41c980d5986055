// Package dirlock gives one process a directory to itself: an exclusive
// flock on the directory, held as long as the process lives (the kernel
// drops it when the process dies, however it dies). Two agents on one state
// dir would fight over it: the orphan re-applies what the new one released.
package dirlock

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrHeld is wrapped when another process holds the lock.
var ErrHeld = errors.New("held by another process")

// Lock is a held directory lock.
type Lock struct{ fd int }

// Acquire creates dir (mode) when missing, refuses it when it is not the
// process's own (Own), and locks it without waiting.
func Acquire(dir string, mode os.FileMode) (*Lock, error) {
	if err := Own(dir, mode); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w (is another sluice-agent running on it?)", dir, ErrHeld)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return &Lock{fd: fd}, nil
}

// Release lets the directory go.
func (l *Lock) Release() error { return unix.Close(l.fd) }
