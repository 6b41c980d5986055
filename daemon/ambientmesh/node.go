package ambientmesh

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"
	coreinformers "k8s.io/client-go/informers/core/v1"

	"github.com/sluicemesh/sluice/daemon/ambientmesh/internal/hostprobe"
	"github.com/sluicemesh/sluice/daemon/istioadopt"
	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
)

// probeRecheckMax bounds how long a kubelet restarted under another uid
// waits for its probes to be SNATed again: a liveness probe fails 3 times
// 10 s apart by default before the kubelet restarts the container.
const probeRecheckMax = 5 * time.Second

// NodeConfig is what the ambient node is built from: plain values from
// the agent's flags, and the agent's parts it works with.
type NodeConfig struct {
	// HostNetns is the host netns's path (--host-netns); "" is the
	// agent's own.
	HostNetns string
	// HostProc is the host's /proc (--host-proc), where the kubelet is
	// looked for and istio-cni's pods' netns are found.
	HostProc string
	// Host is the host probe table's configuration; with FollowKubelet
	// its ProbeUID is the kubelet's instead.
	Host redirect.HostConfig
	// FollowKubelet SNATs the uid of the kubelet running in the host
	// netns, followed across its restarts (--probe-snat-uid auto).
	FollowKubelet bool
	// Recheck is how often the kubelet is looked for again
	// (--resync-interval); at most probeRecheckMax.
	Recheck time.Duration
	// ZtunnelSocket is the ZDS socket's path (--ztunnel-socket).
	ZtunnelSocket string
	// ConnectWait is how long an ADD waits for a ztunnel
	// (--ztunnel-connect-wait); 0 is no wait.
	ConnectWait time.Duration
	// Open opens a pod's netns path (podns.Opener.Open).
	Open func(path string) (netns.NsHandle, error)
	// Store is the enrolled-workload store, opened after the node (it is
	// given Workloads). It is called only once the ZDS server serves and
	// the informers run, after the journal is loaded: ztunnel drops every
	// workload its first snapshot leaves out.
	Store func() *workloads.Store
	// Pods is the node's pod informer; nil without Kubernetes. With it,
	// each snapshot also lists the ambient pods istio-cni enrolled that
	// sluice has not adopted yet, so ztunnel keeps their proxies while the
	// node moves from istio-cni to sluice, and the pod addresses the API
	// server reports reach the host probe table (learnProbeAddrs). Its
	// handlers are registered here, before the informers run.
	Pods coreinformers.PodInformer
	Log  *slog.Logger
}

// Node is what --ambient adds to the agent: the host netns, the host probe
// table in it with the probe owner that keeps its SNAT rule on the
// kubelet's uid, and the ZDS server ztunnel connects to. NewNode builds it
// whole; Start runs it, Stop ends it in the order its doc gives, and
// Workloads is what the store needs of it.
type Node struct {
	host     netns.NsHandle
	probe    *hostprobe.Owner
	zds      *ztunnel.Server
	recheck  time.Duration
	log      *slog.Logger
	probeLog *slog.Logger
	// probeDone and zdsDone are closed once the probe owner and the ZDS
	// server (its socket unlinked) have stopped.
	probeDone, zdsDone chan struct{}
	started            atomic.Bool
	closeOnce          sync.Once
}

// NewNode opens the host netns, writes the host probe table and listens on
// the ZDS socket; on an error it closes what it opened.
func NewNode(cfg NodeConfig) (*Node, error) {
	path := cfg.HostNetns
	if path == "" {
		// Nothing has moved a thread yet, so /proc/self is still ours.
		path = "/proc/self/ns/net"
	}
	host, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("--host-netns %s: %w", path, err)
	}
	probeLog := cfg.Log.With("component", "probe-snat")
	probe, err := hostprobe.New(host, cfg.HostProc, cfg.Host, cfg.FollowKubelet, probeLog)
	if err == nil {
		err = probe.Start()
	}
	if err != nil {
		host.Close()
		return nil, fmt.Errorf("host probe table in %s: %w", path, err)
	}
	zds, err := newZDS(cfg)
	if err != nil {
		probe.Close()
		host.Close()
		return nil, err
	}
	return &Node{host: host, probe: probe, zds: zds, recheck: min(cfg.Recheck, probeRecheckMax), log: cfg.Log, probeLog: probeLog,
		probeDone: make(chan struct{}), zdsDone: make(chan struct{})}, nil
}

// newZDS registers the node's pod handlers (with Kubernetes) and listens
// on the ZDS socket.
func newZDS(cfg NodeConfig) (*ztunnel.Server, error) {
	zcfg := ztunnel.Config{
		Path:     cfg.ZtunnelSocket,
		Snapshot: func() []ztunnel.Workload { return cfg.Store().ZtunnelSnapshot() },
		Open:     cfg.Open,
		Logger:   cfg.Log.With("component", "ztunnel"),
		// Config's 0 is its default; ours is no wait.
		ConnectWait: cmp.Or(cfg.ConnectWait, -1),
	}
	if cfg.Pods != nil {
		records := func() []workloads.Record { return cfg.Store().List() }
		pending, err := istioadopt.NewPending(cfg.Pods, records, cfg.HostProc, cfg.Open, nil, cfg.Log.With("component", "adopt"))
		if err != nil {
			return nil, err
		}
		zcfg.Pending = pending.List
		if err := learnProbeAddrs(cfg.Pods, lazyStore(cfg.Store), cfg.Log.With("component", "probe-addrs")); err != nil {
			return nil, err
		}
	}
	return ztunnel.New(zcfg)
}

// lazyStore is the store as learnProbeAddrs needs it, read once a pod
// event arrives (the informers run after the store is opened).
type lazyStore func() *workloads.Store

func (s lazyStore) LearnAddrs(podUID string, ips []netip.Addr) error {
	return s().LearnAddrs(podUID, ips)
}

// Workloads is what the store needs of the ambient node; nil without one.
func (n *Node) Workloads() *workloads.Ambient {
	if n == nil {
		return nil
	}
	return &workloads.Ambient{Ztunnel: n.zds, Host: n.host, RestoreHost: n.probe.Restore}
}

// ZDS is the ZDS server: its readiness, its socket's liveness, and Debug.
func (n *Node) ZDS() *ztunnel.Server { return n.zds }

// Start runs the probe owner (the kubelet's uid followed) and the ZDS
// server until ctx ends; fail ends the agent when the ZDS server cannot
// serve.
func (n *Node) Start(ctx context.Context, fail func(error)) {
	n.started.Store(true)
	go func() {
		defer close(n.probeDone)
		n.probe.Run(ctx, n.recheck)
	}()
	go func() {
		defer close(n.zdsDone)
		if err := n.zds.Run(ctx); err != nil {
			fail(fmt.Errorf("ztunnel server: %w", err))
		}
	}()
}

// Metrics registers the node's metrics.
func (n *Node) Metrics(m *metrics.Metrics) {
	m.Func("gauge", "probe_snat_uid", "The uid whose TCP from the node to ambient pods is SNATed past ztunnel as kubelet probes; -1: none.",
		func() float64 { return float64(n.probe.UID()) })
	m.Func("gauge", "ztunnel_connections", "ztunnel instances connected over ZDS.",
		func() float64 { return float64(n.zds.Connections()) })
	m.Func("counter", "ztunnel_connects_total", "ZDS connections ztunnel opened to the agent; a rise on a steady node is a reconnect.",
		func() float64 { return float64(n.zds.Accepted()) })
}

// Close lets go of what NewNode opened when Start never ran (a later part
// of the agent failed to build or start): the ZDS socket, the kubelet's
// pidfd and the host netns handle. A started node's socket is Run's to
// close, and its handles are left to the process's exit: a handle closed
// under a resync still running could be a reused fd, another netns.
// Closing twice does nothing.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		if err := n.zds.Close(); err != nil {
			n.log.Warn("close the ZDS socket", "err", err)
		}
		if !n.started.Load() {
			n.probe.Close()
			n.host.Close()
		}
	})
}

// Stop ends the node once Start's ctx has ended, after the drain (an
// ambient ADD still in flight needs all of it), in this order:
//
//  1. The probe owner, so that nothing writes the host table after step 3
//     removes it.
//  2. The ZDS server, which unlinks its socket as Run returns: an exit
//     that does not wait leaves the socket behind (seen under load).
//  3. On an uninstall (leaving) only, the host table out; never on an
//     upgrade, where the new agent keeps using it.
//
// Each wait is bounded by 5 s.
func (n *Node) Stop(leaving bool) {
	select {
	case <-n.probeDone:
	case <-time.After(5 * time.Second):
		n.probeLog.Warn("the kubelet's uid follower did not stop within 5s")
	}
	select {
	case <-n.zdsDone:
	case <-time.After(5 * time.Second):
		n.log.Warn("ztunnel server did not stop within 5s")
	}
	if leaving {
		if err := n.probe.Remove(); err != nil {
			n.log.Error("remove the host probe table on exit", "err", err)
		}
	}
}
