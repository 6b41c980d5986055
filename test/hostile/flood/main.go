// Command flood is the hostile suite's client of the agent's health port:
// clients goroutines, each on connections of its own, fetch the given paths
// in turn as fast as the agent answers, for the given time. It prints how
// many requests got an answer and how many failed.
package main

import (
	"flag"
	"fmt"
	"io"
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
	dur := flag.Duration("for", 3*time.Second, "how long to keep at it")
	flag.Parse()
	var answered, failed atomic.Int64
	deadline := time.Now().Add(*dur)
	list := strings.Split(*paths, ",")
	var wg sync.WaitGroup
	for i := range *clients {
		wg.Go(func() {
			// One transport a client: its own connections, as many
			// separate scrapers would have.
			c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
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
	wg.Wait()
	fmt.Printf("answered=%d failed=%d\n", answered.Load(), failed.Load())
	os.Exit(0)
}
