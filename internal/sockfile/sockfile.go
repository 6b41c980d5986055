// Package sockfile listens on a unix socket path the way a node daemon
// must, and is the one owner of these rules for every socket the agent
// serves: the socket's directory is the agent's own (dirlock.Own); a stale
// socket left by a dead process is replaced, one that answers (another
// instance still serving) is an error rather than a silent takeover, a file
// that is not a socket is never removed; the socket is root-only whatever
// the umask; and the path is removed on close only while it still names
// this listener.
package sockfile

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sluicemesh/sluice/internal/dirlock"
)

// Listener is a listening unix socket that can tell whether its path still
// names it.
type Listener struct {
	*net.UnixListener
	stamp Stamp

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
	if err := dirlock.Own(filepath.Dir(path), dirMode); err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	if err := clearStale(network, path); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix(network, &net.UnixAddr{Name: path, Net: network})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// Close removes the file itself, and only while it is still ours.
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("restrict socket %s: %w", path, err)
	}
	stamp, err := NewStamp(path)
	if err != nil {
		l.Close()
		return nil, err
	}
	return &Listener{UnixListener: l, stamp: stamp}, nil
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

// Ours is a liveness check: false once the socket file was removed or
// replaced, when nobody can reach this listener any more.
func (l *Listener) Ours() (bool, string) {
	if err := l.stamp.Check(); err != nil {
		return false, err.Error()
	}
	return true, ""
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
		if ok, _ := l.Ours(); ok {
			os.Remove(l.stamp.path)
		}
		l.closeErr = l.UnixListener.Close()
	})
	return l.closeErr
}
