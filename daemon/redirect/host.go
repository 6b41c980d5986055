package redirect

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// The host table: table inet sluice-host in the node's netns, after
// istio-cni's CreateHostRulesForHealthChecks. The kubelet probes an ambient
// pod from the node, with the node's address, as kube-proxy does when it
// forwards a NodePort or LoadBalancer connection; only the kubelet's must
// pass ztunnel by. So locally sent TCP to an enrolled pod is SNATed to the
// probe address, which the pod's prerouting chain lets in uncaptured.
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
}

// DefaultHostConfig is istio-cni's: both families, Istio's SNAT addresses.
func DefaultHostConfig() HostConfig {
	return HostConfig{ProbeSNATIPv4: DefaultProbeSNATIPv4, ProbeSNATIPv6: DefaultProbeSNATIPv6, IPv4: true, IPv6: true}
}

// BuildHost is the host table for cfg, without set elements. Both sets
// always exist, so adding a pod address never depends on the config.
//
// istio-cni matches "locally sent" with `-m owner --socket-exists`; the
// nearest nft expression, `meta skuid`, only says so by failing to load,
// which reads as nothing. `fib saddr type local` says it plainly: a packet
// whose source is one of the node's addresses was sent by the node. A
// forwarded packet keeps its remote source until it is masqueraded, and
// that happens at this same hook, after the first nat chain has decided.
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

// hostPostrouting SNATs locally sent TCP to an enrolled pod to the probe
// address of its family.
func hostPostrouting(cfg HostConfig) nft.Chain {
	c := nft.NATChain(chainHostPostrouting, nft.HookPostrouting)
	for _, x := range []struct {
		on   bool
		fam  nft.Family
		set  string
		addr netip.Addr
	}{{cfg.IPv4, nft.IPv4, setHostPodsV4, cfg.ProbeSNATIPv4}, {cfg.IPv6, nft.IPv6, setHostPodsV6, cfg.ProbeSNATIPv6}} {
		if x.on {
			c.Rules = append(c.Rules, nft.Rule{
				Tag:     "probe-snat" + tagSuffix(x.fam),
				Matches: []nft.Match{nft.LocalSourceMatch{}, nft.DaddrSetMatch{Family: x.fam, Set: x.set}, nft.L4ProtoMatch{Proto: nft.TCP}},
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
