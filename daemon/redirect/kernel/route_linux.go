package kernel

import (
	"errors"
	"fmt"
	"net"

	mnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/nft"
	"github.com/sluicemesh/sluice/internal/nlsock"
)

// routeProtocol marks the ip rules and routes sluice adds (the rtnetlink
// protocol field, `proto 115` in `ip rule`/`ip route`), so Remove and Verify
// find exactly ours without knowing the Spec that made them.
const routeProtocol = 115

// routeHandle opens rtnetlink inside ns. Like the nftables socket, it is
// made on a thread of its own; the caller's thread never changes netns.
func routeHandle(ns netns.NsHandle) (*netlink.Handle, error) {
	if int(ns) <= 0 {
		return nil, fmt.Errorf("netns handle %d is not an open namespace", int(ns))
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink in netns fd %d: %w", int(ns), err)
	}
	return h, nil
}

// ourRoutes is one rtnetlink handle in a netns and the rules and routes of
// ours it read when opened. An Apply ensures, takes back and prunes with
// the same one: one socket and one read, not one each.
type ourRoutes struct {
	h  *netlink.Handle
	st routeState
}

// openRoutes is routeHandle plus the rules and routes of ours it holds
// now; the caller closes it.
func openRoutes(ns netns.NsHandle) (*ourRoutes, error) {
	h, err := routeHandle(ns)
	if err != nil {
		return nil, err
	}
	st, err := readRoutes(h)
	if err != nil {
		h.Close()
		return nil, err
	}
	return &ourRoutes{h: h, st: st}, nil
}

func (o *ourRoutes) close() { o.h.Close() }

// openRoutesIfAny is openRoutes when ns holds a rule or route of ours
// (anyOurs, over rt), nil when it holds none.
func openRoutesIfAny(ns netns.NsHandle, rt *nlsock.Conn) (*ourRoutes, error) {
	have, err := anyOurs(rt)
	if err != nil || !have {
		return nil, err
	}
	return openRoutes(ns)
}

func (r policyRoute) nlFamily() int {
	if r.Family == nft.IPv6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

func (r policyRoute) nlRule() *netlink.Rule {
	rl := netlink.NewRule()
	rl.Family = r.nlFamily()
	rl.Priority = int(r.Priority)
	rl.Table = int(r.Table)
	rl.Mark = r.Mark
	mask := r.Mask
	rl.Mask = &mask
	rl.Protocol = routeProtocol
	return rl
}

func (r policyRoute) nlRoute() *netlink.Route {
	dst := &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}
	if r.Family == nft.IPv6 {
		dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	return &netlink.Route{
		Family:   r.nlFamily(),
		Dst:      dst,
		Type:     unix.RTN_LOCAL,
		Table:    int(r.Table),
		Protocol: routeProtocol,
		Scope:    netlink.SCOPE_HOST,
	}
}

// policyRoute is one of a ruleset's policy routes and, from ensure, what
// of it that Apply added (only the rule, or only the route), to take back
// when the rest of the Apply fails.
type policyRoute struct {
	redirect.PolicyRoute
	ruleOnly, routeOnly bool
}

// routesOf is r's policy routes.
func routesOf(r *redirect.Ruleset) []policyRoute {
	var out []policyRoute
	for _, rt := range r.Routes() {
		out = append(out, policyRoute{PolicyRoute: rt})
	}
	return out
}

// fibRuleHdrLen is struct fib_rule_hdr, an ip rule message's header.
const fibRuleHdrLen = 12

// anyOurs says whether ns holds any ip rule or route of ours, from one
// rule dump and one route dump over rt (Apply's rtnetlink Conn), reading
// only the protocol. A pod that never had a TPROXY or ambient ruleset has
// none, and its replace and Remove then skip vishvananda/netlink's handle
// (another visit to the netns, two sockets) and its decoding of both dumps.
func anyOurs(rt *nlsock.Conn) (bool, error) {
	for _, typ := range []uint16{unix.RTM_GETRULE, unix.RTM_GETROUTE} {
		msgs, err := rt.Execute(mnl.Message{
			Header: mnl.Header{Type: mnl.HeaderType(typ), Flags: mnl.Request | mnl.Dump},
			Data:   make([]byte, max(fibRuleHdrLen, unix.SizeofRtMsg)), // family 0: every family
		})
		if err != nil {
			return false, fmt.Errorf("list ip rules and routes: %w", err)
		}
		for _, m := range msgs {
			ours, err := isOurs(m)
			if err != nil || ours {
				return ours, err
			}
		}
	}
	return false, nil
}

// isOurs says whether a RTM_NEWRULE or RTM_NEWROUTE message carries
// routeProtocol: a rule in its FRA_PROTOCOL attribute, a route in its
// header's rtm_protocol.
func isOurs(m mnl.Message) (bool, error) {
	switch m.Header.Type {
	case unix.RTM_NEWROUTE:
		return len(m.Data) >= unix.SizeofRtMsg && m.Data[5] == routeProtocol, nil
	case unix.RTM_NEWRULE:
		if len(m.Data) < fibRuleHdrLen {
			return false, nil
		}
		attrs, err := nl.ParseRouteAttr(m.Data[fibRuleHdrLen:])
		if err != nil {
			return false, fmt.Errorf("parse ip rule: %w", err)
		}
		for _, a := range attrs {
			if a.Attr.Type == unix.FRA_PROTOCOL && len(a.Value) > 0 && a.Value[0] == routeProtocol {
				return true, nil
			}
		}
	}
	return false, nil
}

// routeState is what the kernel holds of ours in one netns.
type routeState struct {
	rules  []netlink.Rule
	routes []netlink.Route
}

func readRoutes(h *netlink.Handle) (routeState, error) {
	var st routeState
	rules, err := h.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return st, fmt.Errorf("list ip rules: %w", err)
	}
	for _, rl := range rules {
		if rl.Protocol == routeProtocol {
			st.rules = append(st.rules, rl)
		}
	}
	// Table 0 with the table filter asks for every table.
	st.routes, err = h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC, Protocol: routeProtocol},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return st, fmt.Errorf("list routes: %w", err)
	}
	return st, nil
}

func (r policyRoute) isRule(rl netlink.Rule) bool {
	mask := uint32(nft.FullMask)
	if rl.Mask != nil {
		mask = *rl.Mask
	}
	return rl.Family == r.nlFamily() && rl.Priority == int(r.Priority) && rl.Table == int(r.Table) &&
		rl.Mark == r.Mark && mask == r.Mask && !rl.Invert
}

func (r policyRoute) isRoute(rt netlink.Route) bool {
	return rt.Family == r.nlFamily() && rt.Table == int(r.Table) && rt.Type == unix.RTN_LOCAL &&
		rt.Dst != nil && rt.Dst.IP.IsUnspecified() && isDefault(rt.Dst)
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

// ensure adds each wanted rule and route that is missing; present
// ones are left as they are, so re-applying leaves exactly one of each.
// It returns what it added, also on failure, so the caller can take back
// exactly that (undo) when the rest of the Apply fails.
func (o *ourRoutes) ensure(want []policyRoute) (added []policyRoute, err error) {
	h, st := o.h, o.st
	lo, err := h.LinkByName(redirect.LoopbackInterface)
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", redirect.LoopbackInterface, err)
	}
	for _, w := range want {
		if !containsFunc(st.routes, w.isRoute) {
			rt := w.nlRoute()
			rt.LinkIndex = lo.Attrs().Index
			// Replace, not add: a local default route someone else put in
			// our table is taken over rather than failing the pod.
			if err := h.RouteReplace(rt); err != nil {
				return added, fmt.Errorf("add route local %s dev lo table %d: %w", w.DefaultPrefix(), w.Table, err)
			}
			added = append(added, policyRoute{PolicyRoute: redirect.PolicyRoute{Family: w.Family, Table: w.Table}, routeOnly: true})
		}
		if !containsFunc(st.rules, w.isRule) {
			if err := h.RuleAdd(w.nlRule()); err != nil && !errors.Is(err, unix.EEXIST) {
				return added, fmt.Errorf("add ip %s rule fwmark %#x/%#x lookup %d: %w", w.IPFlag(), w.Mark, w.Mask, w.Table, err)
			}
			r := w
			r.ruleOnly = true
			added = append(added, r)
		}
	}
	return added, nil
}

// undo deletes what ensure added, rules before routes (see prune): an
// Apply that fails leaves the routes as it found them.
func (o *ourRoutes) undo(added []policyRoute) error {
	h := o.h
	var errs []error
	for _, pass := range []bool{true, false} {
		for _, a := range added {
			switch {
			case pass && a.ruleOnly:
				if err := h.RuleDel(a.nlRule()); err != nil && !errors.Is(err, unix.ENOENT) {
					errs = append(errs, fmt.Errorf("take back ip %s rule lookup %d: %w", a.IPFlag(), a.Table, err))
				}
			case !pass && a.routeOnly:
				if err := h.RouteDel(a.nlRoute()); err != nil && !errors.Is(err, unix.ESRCH) {
					errs = append(errs, fmt.Errorf("take back route local %s table %d: %w", a.DefaultPrefix(), a.Table, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// prune deletes every rule and route of ours that keep does not name:
// what a previous Spec needed and this one does not. It works from what
// was read when o was opened; what ensure added since is in keep.
func (o *ourRoutes) prune(keep []policyRoute) error {
	h, st := o.h, o.st
	// Rules first: a rule pointing at a table with no route would let
	// marked packets fall through to the main table.
	for _, rl := range st.rules {
		if !containsFunc(keep, func(k policyRoute) bool { return k.isRule(rl) }) {
			if err := h.RuleDel(&rl); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("delete ip rule %s: %w", rl.String(), err)
			}
		}
	}
	for _, rt := range st.routes {
		if !containsFunc(keep, func(k policyRoute) bool { return k.isRoute(rt) }) {
			if err := h.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete route %s: %w", rt.String(), err)
			}
		}
	}
	return nil
}

// routeDrift names each wanted rule or route that is missing, and each of
// ours that is not wanted.
func routeDrift(ns netns.NsHandle, rt *nlsock.Conn, want []policyRoute) ([]string, error) {
	var o *ourRoutes
	var err error
	if len(want) == 0 {
		// Nothing wanted: only stale ones of ours can drift.
		o, err = openRoutesIfAny(ns, rt)
	} else {
		o, err = openRoutes(ns)
	}
	if err != nil || o == nil {
		return nil, err
	}
	defer o.close()
	st := o.st
	var drift []string
	for _, w := range want {
		if !containsFunc(st.rules, w.isRule) {
			drift = append(drift, fmt.Sprintf("ip %s rule fwmark %#x/%#x lookup %d pref %d is missing", w.IPFlag(), w.Mark, w.Mask, w.Table, w.Priority))
		}
		if !containsFunc(st.routes, w.isRoute) {
			drift = append(drift, fmt.Sprintf("ip %s route local %s dev lo table %d is missing", w.IPFlag(), w.DefaultPrefix(), w.Table))
		}
	}
	for _, rl := range st.rules {
		if !containsFunc(want, func(w policyRoute) bool { return w.isRule(rl) }) {
			drift = append(drift, fmt.Sprintf("ip rule %s is not part of the ruleset", rl.String()))
		}
	}
	for _, rt := range st.routes {
		if !containsFunc(want, func(w policyRoute) bool { return w.isRoute(rt) }) {
			drift = append(drift, fmt.Sprintf("route %s is not part of the ruleset", rt.String()))
		}
	}
	return drift, nil
}

func containsFunc[T any](s []T, f func(T) bool) bool {
	for _, v := range s {
		if f(v) {
			return true
		}
	}
	return false
}
