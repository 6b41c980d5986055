package redirect

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// The host table: table inet sluice-host in the node's netns, after
// istio-cni's CreateHostRulesForHealthChecks. The kubelet probes an ambient
// pod from the node, with the node's address, as kube-proxy does when it
// forwards a NodePort or LoadBalancer connection and as any local user or
// hostNetwork pod can; only the kubelet's must pass ztunnel by. So TCP to an
// enrolled pod sent from a local socket the kubelet's uid owns is SNATed to
// the probe address, which the pod's prerouting chain lets in uncaptured.
//
// Rules are static; which pods are enrolled lives in two sets whose
// elements come and go per pod (AddHostIPs, RemoveHostIPs).

const (
	chainHostPostrouting = "postrouting" // ISTIO_POSTRT
	setHostPodsV4        = "probe-pods-v4"
	setHostPodsV6        = "probe-pods-v6"
)

// HostConfig is the host table's configuration.
type HostConfig struct {
	ProbeSNATIPv4 netip.Addr
	ProbeSNATIPv6 netip.Addr
	IPv4          bool
	IPv6          bool
	// ProbeUID is the kubelet's uid: only TCP from a socket it owns is
	// SNATed. The zero value, no uid, SNATs nothing: every probe is then
	// captured, as any other connection from the node.
	ProbeUID UID
}

// DefaultHostConfig is istio-cni's on a node whose kubelet runs as root:
// both families, Istio's SNAT addresses, uid 0.
func DefaultHostConfig() HostConfig {
	return HostConfig{ProbeSNATIPv4: DefaultProbeSNATIPv4, ProbeSNATIPv6: DefaultProbeSNATIPv6, IPv4: true, IPv6: true,
		ProbeUID: UIDOf(0)}
}

// UID is a uid, or none; the zero value is none.
type UID struct {
	id uint32
	ok bool
}

// UIDOf is the uid id.
func UIDOf(id uint32) UID { return UID{id: id, ok: true} }

// Get is the uid, and whether there is one.
func (u UID) Get() (uint32, bool) { return u.id, u.ok }

// String is the uid in decimal, or "none".
func (u UID) String() string {
	if !u.ok {
		return "none"
	}
	return strconv.FormatUint(uint64(u.id), 10)
}

// BuildHost is the host table for cfg, without set elements. Both sets
// always exist, so adding a pod address never depends on the config.
//
// The rule matches as narrowly as istio-cni's nftables backend, `meta
// skuid <the kubelet's uid>`, and more: the source must also be one of the
// node's own addresses (`fib saddr type local`). skuid reads the sending
// socket's owner, and a packet with no local socket (forwarded by
// kube-proxy, sent by the kernel itself) matches no uid at all, so neither
// it nor another local user's connection passes ztunnel. istio-cni's
// iptables backend (`-m owner --socket-exists`) let any local socket pass.
// A kubelet running as root shares uid 0 with every root process: those
// pass too, as under istio-cni; non-root users do not.
func BuildHost(cfg HostConfig) (*Ruleset, error) {
	var errs []error
	if !cfg.IPv4 && !cfg.IPv6 {
		errs = append(errs, errors.New("neither IPv4 nor IPv6 is enabled"))
	}
	errs = append(errs, probeAddrErrors(cfg.IPv4, cfg.ProbeSNATIPv4, cfg.IPv6, cfg.ProbeSNATIPv6)...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid host config: %w", errors.Join(errs...))
	}
	t := &nft.Table{Name: HostTableName,
		Sets:   []nft.Set{{Name: setHostPodsV4, Type: nft.SetIPv4Addrs}, {Name: setHostPodsV6, Type: nft.SetIPv6Addrs}},
		Chains: []nft.Chain{hostPostrouting(cfg)}}
	// No policy routes, no addresses: the table is all there is.
	return &Ruleset{table: t, text: t.Render()}, nil
}

// hostPostrouting SNATs TCP to an enrolled pod sent by the kubelet's uid
// to the probe address of its family; with no uid the chain is empty.
func hostPostrouting(cfg HostConfig) nft.Chain {
	c := nft.NATChain(chainHostPostrouting, nft.HookPostrouting)
	uid, ok := cfg.ProbeUID.Get()
	if !ok {
		return c
	}
	for _, x := range []struct {
		on   bool
		fam  nft.Family
		set  string
		addr netip.Addr
	}{{cfg.IPv4, nft.IPv4, setHostPodsV4, cfg.ProbeSNATIPv4}, {cfg.IPv6, nft.IPv6, setHostPodsV6, cfg.ProbeSNATIPv6}} {
		if x.on {
			c.Rules = append(c.Rules, nft.Rule{
				Tag:     "probe-snat" + tagSuffix(x.fam),
				Matches: []nft.Match{nft.LocalSourceMatch{}, nft.OwnerMatch{ID: uid}, nft.DaddrSetMatch{Family: x.fam, Set: x.set}, nft.L4ProtoMatch{Proto: nft.TCP}},
				Stmts:   []nft.Stmt{nft.SNATStmt{Addr: x.addr}},
			})
		}
	}
	return c
}

// HostSetAddrs sorts pod addresses into the host table's two sets, as
// the kernel's AddHostIPs and RemoveHostIPs send them: none for none, and
// ok false when one is not a valid address.
func HostSetAddrs(ips []netip.Addr) (sets []nft.Addrs, ok bool) {
	byset := map[string][]netip.Addr{}
	for _, ip := range ips {
		ip = ip.Unmap()
		if !ip.IsValid() {
			return nil, false
		}
		byset[hostSet(ip)] = append(byset[hostSet(ip)], ip)
	}
	if len(byset) == 0 {
		return nil, true
	}
	return []nft.Addrs{{Set: setHostPodsV4, Addrs: byset[setHostPodsV4]}, {Set: setHostPodsV6, Addrs: byset[setHostPodsV6]}}, true
}

// hostSet is the set a pod address belongs in.
func hostSet(a netip.Addr) string {
	if a.Is4() {
		return setHostPodsV4
	}
	return setHostPodsV6
}
