package kernel

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dialEnv turns the test binary into a one-shot client: the tests re-exec
// it under another uid or gid, since a socket's owner is fixed by the
// credentials of the process that creates it.
const dialEnv = "SLUICE_REDIRECT_TEST_DIAL"

func TestMain(m *testing.M) {
	if target := os.Getenv(dialEnv); target != "" {
		os.Exit(childDial(target))
	}
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	os.Exit(code)
}

// cleanups run once after all tests, for state shared between them.
var cleanups []func()

// childDial enters the netns passed as fd 3 (it keeps CAP_SYS_ADMIN as an
// ambient capability for that alone), dials "network address" and prints
// the server's greeting line.
func childDial(target string) int {
	runtime.LockOSThread()
	if err := unix.Setns(3, unix.CLONE_NEWNET); err != nil {
		fmt.Fprintln(os.Stderr, "setns:", err)
		return 2
	}
	network, rest, _ := strings.Cut(target, " ")
	addr, local, _ := strings.Cut(rest, " ")
	line, err := exchangeFrom(network, local, addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(line)
	return 0
}

// exchange dials (for UDP: sends one datagram) and returns the first line
// the other end sends back.
func exchange(network, addr string) (string, error) { return exchangeFrom(network, "", addr) }

// exchangeFrom is exchange from the local address local ("" for any).
func exchangeFrom(network, local, addr string) (string, error) {
	d := net.Dialer{Timeout: 3 * time.Second}
	if local != "" {
		var err error
		if strings.HasPrefix(network, "udp") {
			d.LocalAddr, err = net.ResolveUDPAddr(network, local)
		} else {
			d.LocalAddr, err = net.ResolveTCPAddr(network, local)
		}
		if err != nil {
			return "", err
		}
	}
	c, err := d.Dial(network, addr)
	if err != nil {
		return "", fmt.Errorf("dial %s %s: %w", network, addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if strings.HasPrefix(network, "udp") {
		if _, err := c.Write([]byte("q\n")); err != nil {
			return "", fmt.Errorf("send to %s: %w", addr, err)
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read from %s %s: %w", network, addr, err)
	}
	return strings.TrimSpace(line), nil
}
