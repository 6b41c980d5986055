package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/vishvananda/netns"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/daemon/ambientmesh"
	"github.com/sluicemesh/sluice/daemon/istioadopt"
	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
)

// ambientNode is what --ambient adds to the agent: the host probe table in
// the host netns and the ZDS server ztunnel connects to.
type ambientNode struct {
	host  netns.NsHandle
	probe *probeOwner
	zds   *ztunnel.Server
}

// newAmbient prepares the host side and the ZDS socket. snapshot lists the
// store's ambient pods; it is read only once the ZDS server serves, after
// the journal is loaded: ztunnel drops every workload its first snapshot
// leaves out.
//
// With Kubernetes (informers non-nil), each snapshot also lists the
// ambient pods istio-cni enrolled that sluice has not adopted yet
// (records says which pods sluice holds), so ztunnel keeps their proxies
// while the node moves from istio-cni to sluice.
func newAmbient(cfg *config, opener *podns.Opener, snapshot func() []ztunnel.Workload, records func() []workloads.Record, informers *kubecache.Cache, log *slog.Logger) (*ambientNode, error) {
	path := cfg.hostNetns
	if path == "" {
		// Nothing has moved a thread yet, so /proc/self is still ours.
		path = "/proc/self/ns/net"
	}
	host, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("--host-netns %s: %w", path, err)
	}
	probe, err := newProbeOwner(cfg, host, log.With("component", "probe-snat"))
	if err == nil {
		err = probe.start()
	}
	if err != nil {
		host.Close()
		return nil, fmt.Errorf("host probe table in %s: %w", path, err)
	}
	zcfg := ztunnel.Config{
		Path:     cfg.ztunnelSocket,
		Snapshot: snapshot,
		Open:     opener.Open,
		Logger:   log.With("component", "ztunnel"),
		// Config's 0 is its default; the flag's 0 is no wait.
		ConnectWait: cmp.Or(cfg.ztunnelWait, -1),
	}
	if informers != nil {
		pending, err := istioadopt.NewPending(informers.Pods, records, cfg.hostProc, opener.Open, nil, log.With("component", "adopt"))
		if err != nil {
			host.Close()
			return nil, err
		}
		zcfg.Pending = pending.List
	}
	zds, err := ztunnel.New(zcfg)
	if err != nil {
		host.Close()
		return nil, err
	}
	return &ambientNode{host: host, probe: probe, zds: zds}, nil
}

// workloads is what the store needs of the ambient node.
func (a *ambientNode) workloads() *workloads.Ambient {
	if a == nil {
		return nil
	}
	return &workloads.Ambient{Ztunnel: a.zds, Host: a.host, RestoreHost: a.probe.restore}
}

// uninstall removes the host side; only on an uninstall exit, never on an
// upgrade, where the new agent keeps using it.
func (a *ambientNode) uninstall() error {
	return kernel.Netlink{}.RemoveHostTable(redirect.Netns(a.host))
}

// ambientPart runs the ambient node: the ZDS server in the background,
// and on an uninstall the host table out, after the drain.
type ambientPart struct {
	basePart
	node *ambientNode
	log  *slog.Logger
	// done is closed once the ZDS server has stopped and unlinked its
	// socket.
	done chan struct{}
}

// addAmbient builds the agent's one ambient owner (ambientmesh.Mesh, with
// the redirection annotator when there is Kubernetes), which the CNI
// service, live enrolment and adoption share, and adds the ambient node as
// a part, once the store it feeds exists: with Kubernetes, the pod
// addresses the API server reports reach the host probe table
// (learnProbeAddrs, registered before the informers run).
func (a *agent) addAmbient() error {
	var client kubernetes.Interface
	if a.k != nil {
		client = a.k.client
	}
	a.mesh = ambientmesh.New(a.store, client, a.log.With("component", "redirection"))
	if a.amb == nil {
		return nil
	}
	if a.k != nil {
		if err := learnProbeAddrs(a.k.informers.Pods, a.store, a.log.With("component", "probe-addrs")); err != nil {
			return err
		}
	}
	// The probe owner stops first: nothing writes the host table after the
	// ambient part removes it.
	a.parts = append(a.parts, &probeOwnerPart{owner: a.amb.probe, every: min(a.cfg.resync, probeRecheckMax), done: make(chan struct{})},
		&ambientPart{node: a.amb, log: a.log, done: make(chan struct{})})
	return nil
}

func (p *ambientPart) start(ctx context.Context, fail func(error)) error {
	go func() {
		defer close(p.done)
		if err := p.node.zds.Run(ctx); err != nil {
			fail(fmt.Errorf("ztunnel server: %w", err))
		}
	}()
	return nil
}

func (p *ambientPart) metrics(m *metrics.Metrics) {
	m.Func("gauge", "ztunnel_connections", "ztunnel instances connected over ZDS.",
		func() float64 { return float64(p.node.zds.Connections()) })
	m.Func("counter", "ztunnel_connects_total", "ZDS connections ztunnel opened to the agent; a rise on a steady node is a reconnect.",
		func() float64 { return float64(p.node.zds.Accepted()) })
}

func (p *ambientPart) leavesState() bool { return true }

// stop waits for the ZDS server, which unlinks its socket as Run returns
// (an exit that does not wait leaves the socket behind; seen under load),
// then on an uninstall removes the host table: after the drain, as an
// ambient ADD still in flight needs it.
func (p *ambientPart) stop(leaving, drained bool) {
	if !drained {
		return
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.log.Warn("ztunnel server did not stop within 5s")
	}
	if leaving {
		if err := p.node.uninstall(); err != nil {
			p.log.Error("remove the host probe table on exit", "err", err)
		}
	}
}
