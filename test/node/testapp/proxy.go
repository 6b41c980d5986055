package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/sluicemesh/sluice/internal/origdst"
)

// runProxy listens on every port and blocks.
func runProxy(ports []string) error {
	if len(ports) == 0 {
		return errors.New("proxy: no ports")
	}
	errc := make(chan error, len(ports))
	for _, p := range ports {
		l, err := listenTransparent("[::]:" + p)
		if err != nil {
			return err
		}
		go func() { errc <- serveCaptured(l, "proxy") }()
	}
	return <-errc
}

// listenTransparent listens with IP_TRANSPARENT where it can, so a tproxy
// rule can deliver to it as well as a nat redirect.
func listenTransparent(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_TRANSPARENT, 1)
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_IPV6, 75 /* IPV6_TRANSPARENT */, 1)
		})
	}}
	// The listener lives as long as the process: nothing to cancel.
	l, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return l, nil
}

// serveCaptured answers each connection with the line it also logs:
// "<who> captured on :<port> original dst <addr> from <peer>".
func serveCaptured(l net.Listener, who string) error {
	port := l.Addr().(*net.TCPAddr).Port
	for {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("accept on :%d: %w", port, err)
		}
		go func() {
			defer c.Close()
			dst := originalDst(c.(*net.TCPConn))
			line := fmt.Sprintf("%s captured on :%d original dst %s from %s", who, port, dst, c.RemoteAddr())
			fmt.Println(line)
			_, _ = c.Write([]byte(line + "\n"))
		}()
	}
}

// originalDst is where the client meant to go: SO_ORIGINAL_DST after a nat
// redirect, the local address itself after a tproxy.
func originalDst(c *net.TCPConn) netip.AddrPort {
	if dst, err := origdst.Get(c); err == nil {
		return dst
	}
	return c.LocalAddr().(*net.TCPAddr).AddrPort()
}

// runApp serves port with "app" and dials target every half second,
// logging "app dial <target>: <reply or error>".
func runApp(args []string) error {
	if len(args) != 2 {
		return errors.New("app: want PORT DIAL")
	}
	l, err := net.Listen("tcp", "[::]:"+args[0])
	if err != nil {
		return fmt.Errorf("app: %w", err)
	}
	// The first line: its log timestamp is when the app ran, which times pod
	// start finer than the kubelet's status (test/peer's BenchmarkPodStart).
	fmt.Printf("app listening on %s\n", l.Addr())
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Printf("app served %s\n", c.RemoteAddr())
			_, _ = c.Write([]byte("app\n"))
			c.Close()
		}
	}()
	for ; ; time.Sleep(500 * time.Millisecond) {
		fmt.Printf("app dial %s: %s\n", args[1], dialOnce(args[1]))
	}
}

func dialOnce(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "error " + err.Error()
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return "connected, no reply: " + err.Error()
	}
	return strings.TrimSpace(line)
}
