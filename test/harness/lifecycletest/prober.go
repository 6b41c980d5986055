package lifecycletest

import (
	"bufio"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// The prober's own network, linked to the node as another node's pod
// would reach it: not the node's address (ambient lets the node's own
// probes by), and outside the kubelet, so it keeps probing across a
// reboot.
const (
	proberAddr   = "100.64.77.1/30"
	proberNodeIP = "100.64.77.2"
)

// probeResult is what one connection to an app's port met.
type probeResult int

const (
	probeDown     probeResult = iota // no answer: refused, reset, timeout
	probeCaptured                    // the pod's proxy or ztunnel answered on 15006
	probeApp                         // the app itself answered: uncaptured
)

// prober dials port 8080 of every address it is given, over and over,
// and counts what answers.
type prober struct {
	ns     *nstest.NS
	mu     sync.Mutex
	counts map[string]map[probeResult]int // address -> result -> n
	last   map[string]string              // address -> last captured reply
	apps   []string                       // when and where the app answered
	wg     sync.WaitGroup
	ctx    context.Context
}

// newProber makes the prober's netns, linked to node's, with its default
// route through the node.
func newProber(ctx context.Context, t *testing.T, node *nodetest.Cluster) *prober {
	return newProberOn(ctx, t, node.NetnsPath())
}

// proberLink is the prober's link in the node's netns.
const proberLink = "lcprobe0"

// newProberOn links the prober to the netns at nodePath. The node's end
// is deleted at cleanup rather than left to the kernel: a deleted netns
// frees its links later, from a workqueue, and the suite's next test on
// the same node would meet the old link's name. One a killed run left
// behind is deleted first for the same reason.
func newProberOn(ctx context.Context, t *testing.T, nodePath string) *prober {
	n := &nstest.NS{Name: "node", Path: nodePath}
	if err := n.Do(func() error { return deleteLink(proberLink) }); err != nil {
		t.Fatalf("stale prober link: %v", err)
	}
	ns := nstest.New(t, "prober")
	nstest.Veth(t, ns, "eth0", []string{proberAddr}, n, proberLink, []string{proberNodeIP + "/30"})
	t.Cleanup(func() {
		if err := n.Do(func() error { return deleteLink(proberLink) }); err != nil {
			t.Errorf("prober link: %v", err)
		}
	})
	ns.Run(t, "ip", "route", "add", "default", "via", proberNodeIP)
	return &prober{ns: ns, ctx: ctx, counts: map[string]map[probeResult]int{}, last: map[string]string{}}
}

// deleteLink deletes the link named name in the current netns, if any.
func deleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if errors.As(err, &netlink.LinkNotFoundError{}) {
		return nil
	}
	if err != nil {
		return err
	}
	return netlink.LinkDel(l)
}

// watch starts probing ip, once per address.
func (p *prober) watch(ip string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.counts[ip]; ok {
		return
	}
	p.counts[ip] = map[probeResult]int{}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for p.ctx.Err() == nil {
			res, line := p.probe(ip)
			p.mu.Lock()
			p.counts[ip][res]++
			switch res {
			case probeApp:
				p.apps = append(p.apps, time.Now().Format("15:04:05.000")+" "+ip)
			case probeCaptured:
				p.last[ip] = line
			}
			p.mu.Unlock()
			time.Sleep(50 * time.Millisecond) // the probing rate
		}
	}()
}

// probe makes one connection to ip:8080 and classifies its first line.
func (p *prober) probe(ip string) (probeResult, string) {
	c, err := p.ns.Dial("tcp", ip+":8080", 300*time.Millisecond)
	if err != nil {
		return probeDown, ""
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	line = strings.TrimSpace(line)
	switch {
	case line == "app":
		return probeApp, line
	case strings.Contains(line, "captured on :15006"):
		return probeCaptured, line
	}
	return probeDown, line
}

// captured is the last captured reply from ip, "" if none.
func (p *prober) captured(ip string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[ip]
}

// forget drops what the prober last saw captured, so a later captured()
// is news.
func (p *prober) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = map[string]string{}
}

// tally is how many probes were made, how many an app answered itself,
// at how many distinct addresses, and when and where.
func (p *prober) tally() (probes, app, addrs int, where []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.counts {
		probes += n[probeDown] + n[probeCaptured] + n[probeApp]
		app += n[probeApp]
		if n[probeApp] > 0 {
			addrs++
		}
	}
	return probes, app, addrs, p.apps
}
