package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
)

// probeUIDFlag is --probe-snat-uid: auto, none, or a uid.
type probeUIDFlag struct{ s string }

const (
	probeUIDAuto = "auto"
	probeUIDNone = "none"
)

func (f *probeUIDFlag) String() string { return f.s }

func (f *probeUIDFlag) Set(s string) error {
	if s != probeUIDAuto && s != probeUIDNone {
		// (uid_t)-1 is no uid: setresuid takes it for "unchanged".
		if n, err := strconv.ParseUint(s, 10, 32); err != nil || n == math.MaxUint32 {
			return fmt.Errorf("want auto, none or a uid, got %q", s)
		}
	}
	f.s = s
	return nil
}

// auto is whether the uid is the running kubelet's.
func (f *probeUIDFlag) auto() bool { return f.s == probeUIDAuto || f.s == "" }

// uid is the uid the flag names; none for none and for auto.
func (f *probeUIDFlag) uid() redirect.UID {
	n, err := strconv.ParseUint(f.s, 10, 32)
	if err != nil {
		return redirect.UID{}
	}
	return redirect.UIDOf(uint32(n))
}

// probeRecheckMax bounds how long a kubelet restarted under another uid
// waits for its probes to be SNATed again: a liveness probe fails 3 times
// 10 s apart by default before the kubelet restarts the container.
const probeRecheckMax = 5 * time.Second

// probeOwner keeps the host probe table's SNAT rule on the kubelet's uid.
// With --probe-snat-uid auto the kubelet is found at start and looked for
// again every recheck: while the one found runs, that is one read of its
// status; when it is gone, a scan of the host's /proc. A kubelet found
// under another uid rewrites the table (one transaction, the sets kept);
// none found leaves the table as it is, and at start with no SNAT rule:
// no host process passes ztunnel, so probes fail rather than a local user
// getting in as the kubelet. Only the owner's start and run touch kubelet.
type probeOwner struct {
	hostProc string
	host     nsID
	auto     bool
	base     redirect.HostConfig
	ensure   func(redirect.HostConfig) error
	log      *slog.Logger

	kubelet *kubeletProc
	missing bool         // the kubelet was not found last time (logged once)
	uid     atomic.Int64 // the uid the table holds, -1 none
	// writes orders the table's writes: the owner's (start, follow) and
	// the store's restore of a table someone deleted.
	writes sync.Mutex
}

// newProbeOwner is the probe owner of the host netns host, whose table
// cfg configures.
func newProbeOwner(cfg *config, host netns.NsHandle, log *slog.Logger) (*probeOwner, error) {
	id, err := fdNsID(int(host))
	if err != nil {
		return nil, fmt.Errorf("host netns: %w", err)
	}
	p := &probeOwner{hostProc: cfg.hostProc, host: id, auto: cfg.probeSNATUID.auto(), base: cfg.hostConfig(), log: log,
		ensure: func(hc redirect.HostConfig) error { return kernel.Netlink{}.EnsureHostTable(redirect.Netns(host), hc) }}
	p.uid.Store(-1)
	return p, nil
}

// start writes the host table: for auto, with the kubelet's uid, or no
// SNAT rule when no kubelet is found.
func (p *probeOwner) start() error {
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

func (p *probeOwner) source() string {
	switch {
	case !p.auto:
		return "--probe-snat-uid"
	case p.kubelet == nil:
		return "no kubelet found"
	}
	return "kubelet pid " + strconv.Itoa(p.kubelet.pid)
}

func (p *probeOwner) store(u redirect.UID) {
	if id, ok := u.Get(); ok {
		p.uid.Store(int64(id))
		return
	}
	p.uid.Store(-1)
}

func (p *probeOwner) notFound(err error) {
	if !p.missing {
		p.log.Warn("kubelet not found: no host process is SNATed past ztunnel, so kubelet probes of ambient pods are captured (and fail under STRICT mTLS) until it is; looking again", "err", err)
	}
	p.missing = true
}

// recheck follows the kubelet: the one known while it runs, else a new one.
func (p *probeOwner) recheck() error {
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
func (p *probeOwner) follow(k *kubeletProc, uid uint32) error {
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

// restore writes the host table again with the uid it last held (none:
// no SNAT rule), for the store when the table is gone (an `nft flush
// ruleset` on the node): its pods' addresses follow from the store.
func (p *probeOwner) restore() error {
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

// run rechecks every period until ctx ends.
func (p *probeOwner) run(ctx context.Context, every time.Duration) {
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

// probeOwnerPart runs the probe owner beside the ambient part, listed
// before it: its stop waits for the owner, so no table is written after
// the ambient part removes it on an uninstall.
type probeOwnerPart struct {
	basePart
	owner *probeOwner
	every time.Duration
	done  chan struct{}
}

func (p *probeOwnerPart) start(ctx context.Context, _ func(error)) error {
	go func() {
		defer close(p.done)
		p.owner.run(ctx, p.every)
	}()
	return nil
}

func (p *probeOwnerPart) metrics(m *metrics.Metrics) {
	m.Func("gauge", "probe_snat_uid", "The uid whose TCP from the node to ambient pods is SNATed past ztunnel as kubelet probes; -1: none.",
		func() float64 { return float64(p.owner.uid.Load()) })
}

func (p *probeOwnerPart) stop(_, drained bool) {
	if !drained {
		return
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.owner.log.Warn("the kubelet's uid follower did not stop within 5s")
	}
}
