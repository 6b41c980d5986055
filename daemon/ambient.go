package main

import (
	"fmt"
	"log/slog"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/istioadopt"
	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
)

// ambientNode is what --ambient adds to the agent: the host probe table in
// the host netns and the ZDS server ztunnel connects to.
type ambientNode struct {
	host netns.NsHandle
	zds  *ztunnel.Server
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
	if err := (kernel.Netlink{}).EnsureHostTable(redirect.Netns(host), cfg.hostConfig()); err != nil {
		host.Close()
		return nil, fmt.Errorf("host probe table in %s: %w", path, err)
	}
	zcfg := ztunnel.Config{
		Path:     cfg.ztunnelSocket,
		Snapshot: snapshot,
		Open:     opener.Open,
		Logger:   log.With("component", "ztunnel"),
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
	return &ambientNode{host: host, zds: zds}, nil
}

// workloads is what the store needs of the ambient node.
func (a *ambientNode) workloads() *workloads.Ambient {
	if a == nil {
		return nil
	}
	return &workloads.Ambient{Ztunnel: a.zds, Host: a.host}
}

// uninstall removes the host side; only on an uninstall exit, never on an
// upgrade, where the new agent keeps using it.
func (a *ambientNode) uninstall() error {
	return kernel.Netlink{}.RemoveHostTable(redirect.Netns(a.host))
}
