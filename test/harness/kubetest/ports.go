package kubetest

import (
	"fmt"
	"net"
)

// freePort asks the kernel for an unused loopback port. Another process
// could take it before our child binds it; on a test machine that race is
// rare enough that a clear "address in use" from the child is the answer.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
