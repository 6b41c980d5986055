// Command flood is the hostile suite's client of the agent's health port:
// clients goroutines, each on connections of its own, fetch the given paths
// in turn as fast as the agent answers, and hold goroutines each keep a
// connection open with half a request on it (slowloris), opening another
// when the agent closes it, for the given time. It prints how many requests
// got an answer, how many failed, and how many held connections were cut.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9890", "health address")
	clients := flag.Int("clients", 2000, "clients at once")
	paths := flag.String("paths", "/metrics,/readyz", "paths to fetch, in turn")
	sources := flag.Int("sources", 1, "loopback addresses the clients spread over (127.0.1.x), as many pods would")
	hold := flag.Int("hold", 0, "connections held open with half a request")
	holdFrom := flag.String("hold-from", "", "source address of the held connections (default: the kernel's choice)")
	dur := flag.Duration("for", 3*time.Second, "how long to keep at it")
	flag.Parse()
	var answered, failed, cut atomic.Int64
	deadline := time.Now().Add(*dur)
	list := strings.Split(*paths, ",")
	var wg sync.WaitGroup
	for i := range *clients {
		wg.Go(func() {
			// One transport a client: its own connections, as many
			// separate scrapers would have.
			from := &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%*sources))}
			c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1,
				DialContext: (&net.Dialer{LocalAddr: from}).DialContext}}
			for j := i; time.Now().Before(deadline); j++ {
				resp, err := c.Get("http://" + *addr + list[j%len(list)])
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answered.Add(1)
			}
		})
	}
	for range *hold {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				holdOne(*addr, *holdFrom, deadline)
				cut.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("answered=%d failed=%d cut=%d\n", answered.Load(), failed.Load(), cut.Load())
	os.Exit(0)
}

// holdOne opens a connection (from the given source address, when one is
// given), sends half a request and waits until the agent closes it or the
// deadline passes.
func holdOne(addr, from string, deadline time.Time) {
	d := net.Dialer{Timeout: time.Until(deadline)}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		time.Sleep(10 * time.Millisecond) // the backlog is full; try again
		return
	}
	defer c.Close()
	c.SetDeadline(deadline)
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
	io.Copy(io.Discard, c)
}
