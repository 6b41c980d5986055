package rpc

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/sluicemesh/sluice/internal/sockfile"
)

// Listen opens the agent's unix socket: its directory 0700, the socket 0600,
// both root's.
func Listen(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create socket dir %s: %w", dir, err)
	}
	// The directory may predate us with a looser mode; close it before the
	// socket exists.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restrict socket dir %s: %w", dir, err)
	}
	return sockfile.Listen("unix", path, 0o700)
}
