package istioadopt

import (
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
)

// Detect reads ns's nf_tables over netlink and returns the capture Istio
// left there (Found is false when there is none). Like sluice's own
// netlink calls it never moves the caller's thread into ns.
func Detect(ns netns.NsHandle) (Capture, error) {
	conn, err := dial(ns)
	if err != nil {
		return Capture{}, fmt.Errorf("detect istio-cni capture: %w", err)
	}
	var c Capture
	tables, err := conn.ListTables()
	if err != nil {
		return c, fmt.Errorf("detect istio-cni capture: list tables in netns fd %d: %w", int(ns), err)
	}
	var iptables []*nftables.Table
	for _, t := range tables {
		switch {
		case t.Family == nftables.TableFamilyINet && slices.Contains(nativeTables, t.Name):
			c.Tables = append(c.Tables, Table{Family: INet, Name: t.Name})
		case isIPFamily(t.Family) && slices.Contains(iptablesTables, t.Name):
			iptables = append(iptables, t)
		}
	}
	if len(iptables) == 0 {
		return c, nil
	}
	chains, err := conn.ListChains()
	if err != nil {
		return c, fmt.Errorf("detect istio-cni capture: list chains in netns fd %d: %w", int(ns), err)
	}
	for _, t := range iptables {
		found, jumps, err := istioChains(conn, t, chains)
		if err != nil {
			return c, fmt.Errorf("detect istio-cni capture in %s in netns fd %d: %w", tableOf(t), int(ns), err)
		}
		c.Chains = append(c.Chains, found...)
		c.Jumps = append(c.Jumps, jumps...)
	}
	return c, nil
}

// istioChains finds t's ISTIO_* chains and, when there are any, the rules
// of t's other chains that jump or go to them.
func istioChains(conn *nftables.Conn, t *nftables.Table, all []*nftables.Chain) ([]Chain, []Jump, error) {
	var found []Chain
	var others []*nftables.Chain
	for _, ch := range all {
		if ch.Table == nil || ch.Table.Name != t.Name || ch.Table.Family != t.Family {
			continue
		}
		if isIstioChain(ch.Name) {
			found = append(found, Chain{Table: tableOf(t), Name: ch.Name})
		} else {
			others = append(others, ch)
		}
	}
	if len(found) == 0 {
		return nil, nil, nil
	}
	var jumps []Jump
	for _, ch := range others {
		rules, err := conn.GetRules(t, ch)
		if err != nil {
			return nil, nil, fmt.Errorf("list rules of chain %s: %w", ch.Name, err)
		}
		for _, r := range rules {
			if target, ok := istioTarget(r); ok {
				jumps = append(jumps, Jump{Table: tableOf(t), Chain: ch.Name, Handle: r.Handle, Target: target})
			}
		}
	}
	return found, jumps, nil
}

// istioTarget is the ISTIO_* chain r jumps or goes to, if any.
func istioTarget(r *nftables.Rule) (string, bool) {
	for _, e := range r.Exprs {
		v, ok := e.(*expr.Verdict)
		if ok && (v.Kind == expr.VerdictJump || v.Kind == expr.VerdictGoto) && isIstioChain(v.Chain) {
			return v.Chain, true
		}
	}
	return "", false
}

func isIPFamily(f nftables.TableFamily) bool {
	return f == nftables.TableFamilyIPv4 || f == nftables.TableFamilyIPv6
}

func tableOf(t *nftables.Table) Table {
	f := INet
	switch t.Family {
	case nftables.TableFamilyIPv4:
		f = IPv4
	case nftables.TableFamilyIPv6:
		f = IPv6
	}
	return Table{Family: f, Name: t.Name}
}

func (t Table) nl() *nftables.Table {
	f := nftables.TableFamilyINet
	switch t.Family {
	case IPv4:
		f = nftables.TableFamilyIPv4
	case IPv6:
		f = nftables.TableFamilyIPv6
	}
	return &nftables.Table{Name: t.Name, Family: f}
}

// dial opens netlink in ns. google/nftables takes fd 0 for "the calling
// thread's netns", so a closed or zero handle would read the agent's own
// netns: refused.
func dial(ns netns.NsHandle) (*nftables.Conn, error) {
	if int(ns) <= 0 {
		return nil, fmt.Errorf("netns handle %d is not an open namespace", int(ns))
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return nil, fmt.Errorf("open netlink in netns fd %d: %w", int(ns), err)
	}
	return conn, nil
}
