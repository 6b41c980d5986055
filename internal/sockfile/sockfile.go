// Package sockfile listens on a unix socket path the way a node daemon
// must, and is the one owner of these rules for every socket the agent
// serves: the socket's directory is the agent's own (dirlock.Own); a stale
// socket left by a dead process is replaced, one that answers (another
// instance still serving) is an error rather than a silent takeover, a file
// that is not a socket is never removed; the socket is root-only whatever
// the umask; and the path is removed on close only while it still names
// this listener. A path found gone (removed by someone: nothing there) is
// listened on again within CheckEvery (Keep), while a path that names
// anything else is left alone: it is not ours to remove.
package sockfile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sluicemesh/sluice/internal/dirlock"
)

// CheckEvery is how often Keep looks for the socket file: one lstat.
const CheckEvery = time.Second

// Listener is a listening unix socket that can tell whether its path still
// names it, and listen there again when the file is removed.
type Listener struct {
	network string
	path    string
	dirMode os.FileMode

	mu       sync.Mutex
	cur      *net.UnixListener // the socket the path names, or named last
	stamp    Stamp
	closed   bool
	restored uint64

	closeOnce sync.Once
	closeErr  error
}

// Listen opens network ("unix" or "unixpacket") at path with mode 0600. The
// directory must be the process's own: created with dirMode when missing,
// else a real directory owned by this euid and writable by no one else
// (dirlock.Own); a shared one is refused, never tightened.
func Listen(network, path string, dirMode os.FileMode) (*Listener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("socket path %q is not absolute", path)
	}
	if err := ownDir(path, dirMode); err != nil {
		return nil, err
	}
	if err := clearStale(network, path); err != nil {
		return nil, err
	}
	l, stamp, err := bind(network, path)
	if err != nil {
		return nil, err
	}
	return &Listener{network: network, path: path, dirMode: dirMode, cur: l, stamp: stamp}, nil
}

func ownDir(path string, dirMode os.FileMode) error {
	if err := dirlock.Own(filepath.Dir(path), dirMode); err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	return nil
}

// bind listens at path, which must name nothing: bind(2) fails on any file
// there, so nothing is ever removed or listened over here.
func bind(network, path string) (*net.UnixListener, Stamp, error) {
	l, err := net.ListenUnix(network, &net.UnixAddr{Name: path, Net: network})
	if err != nil {
		return nil, Stamp{}, fmt.Errorf("listen on %s: %w", path, err)
	}
	// Close removes the file itself, and only while it is still ours; a
	// listener given up for a new one (Restore) removes nothing.
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, Stamp{}, fmt.Errorf("restrict socket %s: %w", path, err)
	}
	stamp, err := NewStamp(path)
	if err != nil {
		l.Close()
		return nil, Stamp{}, err
	}
	return l, stamp, nil
}

// clearStale removes a dead socket at path; a live one or a non-socket is
// an error.
func clearStale(network, path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat socket %s: %w", path, err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("socket path %s exists and is not a socket; refusing to remove it", path)
	}
	if c, err := net.DialTimeout(network, path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("socket %s: another agent is serving on it", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// Accept waits for a connection on the socket the path names; one listened
// on again (Restore) takes over from the one before without an error.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		cur := l.cur
		l.mu.Unlock()
		c, err := cur.AcceptUnix()
		if err == nil {
			return c, nil
		}
		l.mu.Lock()
		replaced := l.cur != cur && !l.closed
		l.mu.Unlock()
		if !replaced {
			return nil, err
		}
	}
}

// Addr is the socket's address.
func (l *Listener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur.Addr()
}

// Ours is a liveness check: false once the socket file was removed or
// replaced, when nobody can reach this listener any more.
func (l *Listener) Ours() (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.stamp.Check(); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// Restore listens at the path again when its file is gone, with the
// directory checks Listen makes, and reports whether it did. Only a missing
// file is restored: a path that names anything (another's socket, a dead
// one, a regular file) is left as it is and Ours stays false. Connections
// accepted before stay up; a client that dialled the old socket just before
// its file went, and was not accepted yet, is dropped and dials again.
func (l *Listener) Restore() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false, nil
	}
	if _, err := os.Lstat(l.path); !errors.Is(err, os.ErrNotExist) {
		if err != nil {
			return false, fmt.Errorf("stat socket %s: %w", l.path, err)
		}
		return false, nil
	}
	if err := ownDir(l.path, l.dirMode); err != nil {
		return false, err
	}
	nl, stamp, err := bind(l.network, l.path)
	if err != nil {
		return false, err
	}
	old := l.cur
	l.cur, l.stamp = nl, stamp
	l.restored++
	old.Close() // Accept moves to the new socket
	return true, nil
}

// Restored is how many times Restore listened again.
func (l *Listener) Restored() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.restored
}

// Keep checks the path every interval until ctx is done or the listener
// closes, and listens again when the file is gone (Restore). report is
// called after each restore with nil, and with each failure to restore
// (retried at the next check) once until the failure changes.
func (l *Listener) Keep(ctx context.Context, every time.Duration, report func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, err := l.Restore()
		switch {
		case ok:
			last = ""
			report(nil)
		case err != nil && err.Error() != last:
			last = err.Error()
			report(err)
		}
		l.mu.Lock()
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return
		}
	}
}

// Close stops listening and removes the socket file while it still names
// this listener: never a file someone put in its place (another agent's
// socket), which the net package's unlink-on-close would remove by name.
// The file is checked and removed while this listener still answers, so no
// new listener can have taken the path in between (it would find this one
// serving and refuse); only the first Close does either, as a later one
// could find the path taken by then.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.closed = true
		if l.stamp.Check() == nil {
			os.Remove(l.path)
		}
		l.closeErr = l.cur.Close()
	})
	return l.closeErr
}
