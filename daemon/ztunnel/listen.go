package ztunnel

import (
	"net"

	"github.com/sluicemesh/sluice/internal/sockfile"
)

// listen opens the SOCK_SEQPACKET socket ztunnel dials. Whoever connects is
// handed every ambient pod's network namespace, so it is root-only
// (ztunnel runs as root). The directory is a hostPath the ztunnel pod
// mounts too: created 0755 when missing, an existing one left alone. A
// sluice server registers a ztunnel only after its hello, so the stale-
// socket probe is never mistaken for one.
func listen(path string) (*net.UnixListener, error) {
	return sockfile.Listen("unixpacket", path, 0o755)
}
