package ztunnel

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// listen opens the SOCK_SEQPACKET socket ztunnel dials. A stale socket left
// by a dead agent is replaced; one that answers (another agent, sluice or
// Istio's, still serving) is an error rather than a silent takeover, and a
// file that is not a socket is never removed.
func listen(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	// The directory is a hostPath the ztunnel pod mounts too: create it
	// when missing, but leave the mode of one that exists alone.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create ztunnel socket dir %s: %w", dir, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("ztunnel socket path %s exists and is not a socket; refusing to remove it", path)
		}
		// A sluice server registers a ztunnel only after its hello, so
		// this probe is never mistaken for one.
		if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("ztunnel socket %s: another agent is serving on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale ztunnel socket %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("stat ztunnel socket %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("listen on ztunnel socket %s: %w", path, err)
	}
	// Whoever connects is handed every ambient pod's network namespace:
	// root only (ztunnel runs as root). Listen honours the umask, so set
	// the mode explicitly.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict ztunnel socket %s: %w", path, err)
	}
	return ln, nil
}
