package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// burstResult is a rebooted node's burst: count pods of the API server,
// every one ADDed at once (each in a fresh netns with an interface, as the
// primary CNI leaves it), by each plugin in turn, in Kubernetes mode.
type burstResult struct {
	count                    int
	loopback, sluice         burstRun
	istioIPT, istioNFT       burstRun
	agentRSSKiB, agentHWMKiB int // the agent's RSS and peak RSS after its burst
}

// burstRun is one plugin's burst: every ADD's latency, the failures, and
// the wall from the first start to the last finish.
type burstRun struct {
	s        series
	failed   int
	firstErr error
	wall     time.Duration
}

// burst creates count sidecar pods bound to the bench node, waits until
// the agent knows every one (the kubelet only starts sandboxes of pods it
// was told about), then runs each plugin's burst of count simultaneous
// ADDs and removes what it made.
func (n *node) burst(c *cluster, ic *istioCNI, count int) (*burstResult, error) {
	pods := make([]podRef, count)
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	debug := sluicev1.NewDebugClient(conn)
	for i := range pods {
		if pods[i], err = c.sidecarPod(fmt.Sprintf("burst-%d", i)); err != nil {
			return nil, err
		}
	}
	for _, p := range pods {
		if err := waitPolicyHas(debug, p); err != nil {
			return nil, err
		}
	}
	res := &burstResult{count: count}
	runs := []struct {
		name string
		conf *libcni.NetworkConfig
		out  *burstRun
	}{{"loopback", n.loopback, &res.loopback}, {"sluice", n.sluice, &res.sluice}}
	if ic != nil {
		runs = append(runs, struct {
			name string
			conf *libcni.NetworkConfig
			out  *burstRun
		}{"istio-cni iptables", ic.iptables, &res.istioIPT}, struct {
			name string
			conf *libcni.NetworkConfig
			out  *burstRun
		}{"istio-cni nftables", ic.nftables, &res.istioNFT})
	}
	for k, r := range runs {
		settle(0)
		if err := n.burstOne(r.name, fmt.Sprintf("burst%d", k), r.conf, pods, r.out); err != nil {
			return nil, err
		}
		if r.conf == n.sluice {
			if res.agentRSSKiB, res.agentHWMKiB, err = n.rssKiB(); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

// burstOne ADDs every pod at once through conf, each in a netns of its
// own made beforehand, then DELs them and removes the netns.
func (n *node) burstOne(name, prefix string, conf *libcni.NetworkConfig, pods []podRef, out *burstRun) error {
	out.s.name = name + " ADD, burst"
	paths := make([]string, len(pods))
	defer func() {
		for _, p := range paths {
			if p != "" {
				n.nd.remove(p)
			}
		}
	}()
	for i := range pods {
		p, err := n.nd.create(fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			return err
		}
		paths[i] = p
		if err := addPodInterface(p); err != nil {
			return err
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i, p := range pods {
		wg.Go(func() {
			<-gate
			d, err := n.run(conf, fmt.Sprintf("%s-%d", prefix, i), paths[i], p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				out.failed++
				if out.firstErr == nil {
					out.firstErr = err
				}
				return
			}
			out.s.add(d)
		})
	}
	start := time.Now()
	close(gate)
	wg.Wait()
	out.wall = time.Since(start)
	for i, p := range pods {
		// Teardown, not measured; a DEL never fails a pod's removal.
		_ = n.lib.DelNetwork(context.Background(), conf, rcPod(fmt.Sprintf("%s-%d", prefix, i), paths[i], p))
	}
	return nil
}

// writeBurstGoals: a rebooted node's burst loses no pod, each ADD within
// 2 s at p99, the agent within 64 MiB.
func writeBurstGoals(m *md, b *burstResult) {
	if b == nil { // section 3 was not run
		return
	}
	row := func(goal, measured string, ok bool) { m.p("| %s | %s | %s |", goal, measured, verdict(ok)) }
	if b == nil {
		row("a rebooted node's burst (Kubernetes mode): 0 failed, p99 ≤ 2 s, agent RSS ≤ 64 MiB", "not measured", false)
		return
	}
	sl := b.sluice
	row(fmt.Sprintf("a rebooted node's burst, %d simultaneous ADDs (Kubernetes mode): 0 failed", b.count),
		fmt.Sprintf("%d sluice, %d loopback, %s istio-cni nftables", sl.failed, b.loopback.failed, failedOf(b.istioNFT)), sl.failed == 0)
	row("… ADD p99 ≤ 2 s", fmt.Sprintf("%s (loopback %s, istio-cni nftables %s)", ms(sl.s.p99()), ms(b.loopback.s.p99()), p99Of(b.istioNFT)),
		sl.failed == 0 && sl.s.p99() <= 2*time.Second)
	row("… agent RSS ≤ 64 MiB", fmt.Sprintf("%.1f MiB (peak %.1f MiB)", float64(b.agentRSSKiB)/1024, float64(b.agentHWMKiB)/1024),
		b.agentHWMKiB <= 64<<10)
}

func failedOf(r burstRun) string {
	if r.s.name == "" {
		return "not measured"
	}
	return fmt.Sprint(r.failed)
}

func p99Of(r burstRun) string {
	if len(r.s.d) == 0 {
		return "not measured"
	}
	return ms(r.s.p99())
}

// writeBurst is the burst's rows: every plugin's ADDs, fired at once.
func writeBurst(m *md, b *burstResult) {
	if b == nil {
		return
	}
	rows := []series{b.loopback.s, b.sluice.s}
	for _, r := range []burstRun{b.istioNFT, b.istioIPT} {
		if r.s.name != "" {
			rows = append(rows, r.s)
		}
	}
	m.table(fmt.Sprintf("3b. A rebooted node's burst: %d API-server pods ADDed at once by each plugin", b.count), rows...)
	for _, r := range []struct {
		name string
		run  burstRun
	}{{"loopback", b.loopback}, {"sluice", b.sluice}, {"istio-cni nftables", b.istioNFT}, {"istio-cni iptables", b.istioIPT}} {
		if r.run.s.name == "" {
			continue
		}
		m.p("- %s: %d of %d failed, the burst's wall %s%s", r.name, r.run.failed, b.count, ms(r.run.wall), firstErr(r.run.firstErr))
	}
	m.p("")
	m.p("As a node's pods come back after a reboot: %d sidecar pods bound to the node in the API server, known to", b.count)
	m.p("the agent's informer, each in a fresh netns with an interface; every plugin's %d ADDs start at once", b.count)
	m.p("(one goroutine each through libcni), the plugins one after another on a settled machine (loopback first,")
	m.p("then sluice, then istio-cni). The agent's")
	m.p("RSS after its burst: %.1f MiB (peak %.1f MiB).", float64(b.agentRSSKiB)/1024, float64(b.agentHWMKiB)/1024)
	m.p("")
}

func firstErr(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf("; first error: `%.200s`", err.Error())
}
