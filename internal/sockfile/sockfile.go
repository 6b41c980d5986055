// Package sockfile listens on a unix socket path the way a node daemon
// must: a stale socket left by a dead process is replaced, one that answers
// (another instance still serving) is an error rather than a silent
// takeover, a file that is not a socket is never removed, and the socket is
// root-only whatever the umask.
package sockfile

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Listen opens network ("unix" or "unixpacket") at path with mode 0600,
// creating its directory with dirMode when missing.
func Listen(network, path string, dirMode os.FileMode) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), dirMode); err != nil {
		return nil, fmt.Errorf("create socket dir for %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("socket path %s exists and is not a socket; refusing to remove it", path)
		}
		if c, err := net.DialTimeout(network, path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s: another agent is serving on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("stat socket %s: %w", path, err)
	}
	l, err := net.ListenUnix(network, &net.UnixAddr{Name: path, Net: network})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("restrict socket %s: %w", path, err)
	}
	return l, nil
}
