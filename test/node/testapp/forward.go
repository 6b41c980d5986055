package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// runForwardProxy is a stand-in for a sidecar that passes traffic on, as
// Envoy does in plain text: what is captured on the outbound port goes on
// to its original destination, and what is captured on the inbound port
// goes to the app on localhost at the original port. The proxy runs as the
// proxy uid, whose own connections capture lets through. Each connection
// is logged "proxy forwarded on :<port> original dst <addr> from <peer>".
func runForwardProxy(args []string) error {
	if len(args) != 2 {
		return errors.New("forward-proxy: want OUTBOUND-PORT INBOUND-PORT")
	}
	out, err := listenTransparent("[::]:" + args[0])
	if err != nil {
		return err
	}
	in, err := listenTransparent("[::]:" + args[1])
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- forward(out, func(dst string) string { return dst }) }()
	go func() {
		errc <- forward(in, func(dst string) string {
			_, port, _ := net.SplitHostPort(dst)
			return net.JoinHostPort("127.0.0.1", port)
		})
	}()
	return <-errc
}

// forward accepts on l and splices each connection to target(its original
// destination).
func forward(l net.Listener, target func(dst string) string) error {
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	for {
		c, err := l.Accept()
		if err != nil {
			return fmt.Errorf("accept on :%s: %w", port, err)
		}
		go func() {
			defer c.Close()
			dst := originalDst(c.(*net.TCPConn)).String()
			fmt.Printf("proxy forwarded on :%s original dst %s from %s\n", port, dst, c.RemoteAddr())
			up, err := net.DialTimeout("tcp", target(dst), 2*time.Second)
			if err != nil {
				fmt.Printf("proxy forward to %s: %v\n", target(dst), err)
				return
			}
			defer up.Close()
			splice(c, up)
		}()
	}
}

// splice copies both ways until either side ends.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	for _, p := range [][2]net.Conn{{a, b}, {b, a}} {
		wg.Go(func() {
			_, _ = io.Copy(p[0], p[1])
			if tc, ok := p[0].(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
		})
	}
	wg.Wait()
}
