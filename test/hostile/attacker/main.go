// Command attacker is the hostile suite's client of the agent socket: run
// under a uid the agent does not allow, it opens conns connections and on
// each as many streams as it may, each a CNI Add whose body announces a
// near-limit request and never finishes, for the given time. It prints how
// many connections were cut and how many request bytes it got out.
package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func main() {
	socket := flag.String("socket", "", "agent socket")
	conns := flag.Int("conns", 8, "connections at once")
	streams := flag.Int("streams", 32, "streams per connection")
	announce := flag.Int("announce", 1<<20-16, "request size each stream announces")
	send := flag.Int("send", 256<<10, "bytes of it each stream sends")
	dur := flag.Duration("for", 3*time.Second, "how long to keep at it")
	flag.Parse()
	var cut, sent atomic.Int64
	deadline := time.Now().Add(*dur)
	var wg sync.WaitGroup
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				n, err := attack(*socket, *streams, *announce, *send, deadline)
				sent.Add(n)
				if err != nil {
					cut.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("cut=%d sent=%d\n", cut.Load(), sent.Load())
	os.Exit(0)
}

// attack runs one connection until deadline; an error means the agent cut it.
func attack(socket string, streams, announce, send int, deadline time.Time) (int64, error) {
	c, err := net.Dial("unix", socket)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	var sent int64
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		return 0, err
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return 0, err
	}
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/sluice.v1.CNI/Add"},
		{":authority", "localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	prefix := make([]byte, 5)
	binary.BigEndian.PutUint32(prefix[1:], uint32(announce))
	chunk := make([]byte, 16<<10)
	for i := range streams {
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr.Bytes(), EndHeaders: true}); err != nil {
			return sent, err
		}
		if err := fr.WriteData(id, false, prefix); err != nil {
			return sent, err
		}
		for left := send; left > 0; left -= len(chunk) {
			if err := fr.WriteData(id, false, chunk[:min(left, len(chunk))]); err != nil {
				return sent, err
			}
			sent += int64(min(left, len(chunk)))
		}
	}
	// Hold the half-sent streams open: read (and drop) whatever comes.
	for {
		if _, err := fr.ReadFrame(); err != nil {
			if time.Now().After(deadline) {
				return sent, nil
			}
			return sent, err
		}
	}
}
