// Package hostprobe owns the host probe table (table inet sluice-host in
// the host netns, redirect/host.go), for daemon/ambientmesh's node only:
// it writes it at start, keeps its SNAT rule on the uid of the kubelet
// running in the host netns (found under the host's /proc, followed across
// its restarts), writes it again when someone deleted it, and removes it
// on an uninstall. The ambient pods' addresses in its sets are the store's
// (workloads), which calls Restore.
package hostprobe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
)

// Owner keeps the host probe table's SNAT rule on the kubelet's uid.
// With auto (--probe-snat-uid auto) the kubelet is found at start and
// looked for again every recheck: while the one found runs, that is one
// read of its status; when it is gone, a scan of the host's /proc. A
// kubelet found under another uid rewrites the table (one transaction,
// the sets kept); none found leaves the table as it is, and at start with
// no SNAT rule: no host process passes ztunnel, so probes fail rather than
// a local user getting in as the kubelet. Only the owner's Start and Run
// touch kubelet.
type Owner struct {
	hostProc string
	host     nsID
	auto     bool
	base     redirect.HostConfig
	ensure   func(redirect.HostConfig) error
	ns       redirect.Netns // the host netns, for Remove
	log      *slog.Logger

	kubelet *kubeletProc
	missing bool         // the kubelet was not found last time (logged once)
	uid     atomic.Int64 // the uid the table holds, -1 none
	// writes orders the table's writes: the owner's (Start, follow) and
	// the store's Restore of a table someone deleted.
	writes sync.Mutex
}

// New is the owner of the host probe table in the host netns host,
// configured by base; with auto, the kubelet found under hostProc sets its
// uid. Nothing is written before Start.
func New(host netns.NsHandle, hostProc string, base redirect.HostConfig, auto bool, log *slog.Logger) (*Owner, error) {
	id, err := fdNsID(int(host))
	if err != nil {
		return nil, fmt.Errorf("host netns: %w", err)
	}
	ns := redirect.Netns(host)
	p := &Owner{hostProc: hostProc, host: id, auto: auto, base: base, log: log, ns: ns,
		ensure: func(hc redirect.HostConfig) error { return kernel.Netlink{}.EnsureHostTable(ns, hc) }}
	p.uid.Store(-1)
	return p, nil
}

// Start writes the host table: for auto, with the kubelet's uid, or no
// SNAT rule when no kubelet is found.
func (p *Owner) Start() error {
	hc := p.base
	if p.auto {
		hc.ProbeUID = redirect.UID{}
		k, err := findKubelet(p.hostProc, p.host)
		if err != nil {
			p.notFound(err)
		} else {
			p.kubelet = k
			hc.ProbeUID = redirect.UIDOf(k.uid)
		}
	}
	if err := p.ensure(hc); err != nil {
		p.kubelet.close()
		p.kubelet = nil
		return err
	}
	p.store(hc.ProbeUID)
	p.log.Info("host probe SNAT", "uid", hc.ProbeUID.String(), "from", p.source())
	return nil
}

func (p *Owner) source() string {
	switch {
	case !p.auto:
		return "--probe-snat-uid"
	case p.kubelet == nil:
		return "no kubelet found"
	}
	return "kubelet pid " + strconv.Itoa(p.kubelet.pid)
}

func (p *Owner) store(u redirect.UID) {
	if id, ok := u.Get(); ok {
		p.uid.Store(int64(id))
		return
	}
	p.uid.Store(-1)
}

func (p *Owner) notFound(err error) {
	if !p.missing {
		p.log.Warn("kubelet not found: no host process is SNATed past ztunnel, so kubelet probes of ambient pods are captured (and fail under STRICT mTLS) until it is; looking again", "err", err)
	}
	p.missing = true
}

// recheck follows the kubelet: the one known while it runs, else a new one.
func (p *Owner) recheck() error {
	if !p.auto {
		return nil
	}
	if p.kubelet != nil {
		uid, err := p.kubelet.readUID()
		if err == nil {
			return p.follow(p.kubelet, uid)
		}
		p.kubelet.close()
		p.kubelet = nil
	}
	k, err := findKubelet(p.hostProc, p.host)
	if err != nil {
		if errors.Is(err, errNoKubelet) {
			p.notFound(err)
			return nil
		}
		return err
	}
	return p.follow(k, k.uid)
}

// follow makes k the kubelet and the table's uid its uid.
func (p *Owner) follow(k *kubeletProc, uid uint32) error {
	if p.kubelet != k {
		p.log.Info("kubelet found", "pid", k.pid, "uid", uid)
		p.kubelet, p.missing = k, false
	}
	if p.uid.Load() == int64(uid) {
		return nil
	}
	hc := p.base
	hc.ProbeUID = redirect.UIDOf(uid)
	p.writes.Lock()
	err := p.ensure(hc)
	if err == nil {
		p.store(hc.ProbeUID)
	}
	p.writes.Unlock()
	if err != nil {
		// Found again next time, and written then.
		p.kubelet.close()
		p.kubelet = nil
		return fmt.Errorf("host probe table for kubelet uid %d: %w", uid, err)
	}
	p.log.Info("host probe SNAT follows the kubelet", "uid", uid, "pid", k.pid)
	return nil
}

// Restore writes the host table again with the uid it last held (none:
// no SNAT rule), for the store when the table is gone (an `nft flush
// ruleset` on the node): its pods' addresses follow from the store.
func (p *Owner) Restore() error {
	p.writes.Lock()
	defer p.writes.Unlock()
	hc := p.base
	if p.auto {
		hc.ProbeUID = redirect.UID{}
		if u := p.uid.Load(); u >= 0 {
			hc.ProbeUID = redirect.UIDOf(uint32(u))
		}
	}
	return p.ensure(hc)
}

// Run rechecks every period until ctx ends.
func (p *Owner) Run(ctx context.Context, every time.Duration) {
	defer func() { p.kubelet.close() }()
	if !p.auto {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := p.recheck(); err != nil {
				p.log.Warn("following the kubelet's uid", "err", err)
			}
		}
	}
}

// UID is the uid the table SNATs, -1 none: the probe_snat_uid metric.
func (p *Owner) UID() int64 { return p.uid.Load() }

// Close lets go of the kubelet found by a Start whose caller then fails;
// Run does it as it returns.
func (p *Owner) Close() { p.kubelet.close() }

// Remove deletes the host probe table: on an uninstall only, once Run has
// returned, never on an upgrade, where the new agent keeps using it.
func (p *Owner) Remove() error { return kernel.Netlink{}.RemoveHostTable(p.ns) }
