package nftnl

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
	"github.com/sluicemesh/sluice/internal/nlsock"
)

// VerifySinceOn reads table inet t.Name in ns and compares it with t. It
// returns one human-readable item per difference, none when the kernel
// holds exactly t; the error is for failing to read at all.
//
// Rules are recognised by their tag (the nft comment ApplyOn gives each)
// and compared expression by expression, so a rule someone replaced, one
// that went missing and one someone added are each named. Like ApplyOn it
// never moves the caller's thread into ns.
//
// It skips reading the table back when nothing in ns's nftables changed
// since generation since (non-zero), at which the table held exactly t:
// ApplyOn's commit made since, or an earlier VerifySinceOn found no drift
// at it. Every nftables change in a netns is a commit that moves its
// generation on (nf_tables' per-netns base_seq), so an unchanged
// generation with the table still there means an unchanged table. It
// returns the generation read before anything else: pass it next time if
// there is no drift. The generation is read first, so a change made while
// the table is read moves it on and the next call reads the table again.
//
// nf is a NETLINK_NETFILTER socket the caller opened in ns (nlsock.Open);
// VerifySinceOn owns it from then on and closes it. google/nftables, which
// reads the table back, is set up only when the table is read (its Conn
// seeds a math/rand source, ~10 µs).
func VerifySinceOn(ns netns.NsHandle, nf *nlsock.Sock, t *nft.Table, since uint32) (drift []string, gen uint32, err error) {
	defer closeLater(nf)
	fail := func(what string, err error) ([]string, uint32, error) {
		return nil, 0, fmt.Errorf("verify table inet %s in netns fd %d: %s: %w", t.Name, int(ns), what, err)
	}
	own := &socket{nl: nf.Conn()}
	if gen, err = own.generation(); err != nil {
		return fail("read the generation", err)
	}
	if since != 0 && gen == since {
		exists, err := own.tableExists(t.Name)
		if err != nil {
			return fail("get table", err)
		}
		if exists {
			return nil, gen, nil
		}
	}
	// google/nftables reads over nf (WithTestDial, the one seam v0.3.0
	// has for a transport).
	conn, err := nftables.New(nftables.WithTestDial(nf.Exchange), nftables.AsLasting())
	if err != nil {
		return fail("netlink", err)
	}
	drift, what, err := tableDrift(conn, t)
	if err != nil {
		return fail(what, err)
	}
	return drift, gen, nil
}

// tableDrift reads table inet t.Name back whole and compares it with t;
// on an error, what says which read failed.
func tableDrift(conn *nftables.Conn, t *nft.Table) (drift []string, what string, err error) {
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, "list tables", err
	}
	if !slices.ContainsFunc(tables, func(nt *nftables.Table) bool { return nt.Name == t.Name }) {
		return []string{fmt.Sprintf("table inet %s is missing", t.Name)}, "", nil
	}
	want := newProgram(t)
	sets, what, err := setDrift(conn, want)
	if err != nil {
		return nil, what, err
	}
	chains, what, err := chainDrift(conn, t, want)
	if err != nil {
		return nil, what, err
	}
	return append(sets, chains...), "", nil
}

// setDrift compares the table's sets and their elements with want's; on an
// error, what says which read failed.
func setDrift(conn *nftables.Conn, want program) (drift []string, what string, err error) {
	driftf := func(format string, args ...any) { drift = append(drift, fmt.Sprintf(format, args...)) }
	gotSets, err := conn.GetSets(want.table)
	if err != nil {
		return nil, "list sets", err
	}
	for i, ws := range want.sets {
		gs := findSet(gotSets, ws.Name)
		switch {
		case gs == nil:
			driftf("set %s is missing", ws.Name)
			continue
		case gs.KeyType.Name != ws.KeyType.Name || gs.Interval != ws.Interval:
			driftf("set %s has type %s (interval %t), want %s (interval %t)", ws.Name, gs.KeyType.Name, gs.Interval, ws.KeyType.Name, ws.Interval)
			continue
		}
		elems, err := conn.GetSetElements(gs)
		if err != nil {
			return nil, "list elements of set " + ws.Name, err
		}
		if !sameElements(elems, want.elems[i]) {
			driftf("set %s elements differ: %d in the kernel, want %d", ws.Name, len(elems), len(want.elems[i]))
		}
	}
	for _, gs := range gotSets {
		if findSet(want.sets, gs.Name) == nil {
			driftf("set %s is not part of the ruleset", gs.Name)
		}
	}
	return drift, "", nil
}

// chainDrift compares the table's chains, their hooks and their rules with
// want's; on an error, what says which read failed.
func chainDrift(conn *nftables.Conn, t *nft.Table, want program) (drift []string, what string, err error) {
	chains, err := conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, "list chains", err
	}
	gotChains := map[string]*nftables.Chain{}
	for _, c := range chains {
		if c.Table.Name == t.Name {
			gotChains[c.Name] = c
		}
	}
	for i, wc := range want.chains {
		gc := gotChains[wc.Name]
		if gc == nil {
			drift = append(drift, fmt.Sprintf("chain %s is missing", wc.Name))
			continue
		}
		delete(gotChains, wc.Name)
		if d := chainHookDrift(gc, wc); d != "" {
			drift = append(drift, fmt.Sprintf("chain %s: %s", wc.Name, d))
		}
		got, err := conn.GetRules(want.table, gc)
		if err != nil {
			return nil, "list rules of chain " + wc.Name, err
		}
		drift = append(drift, ruleDrift(wc.Name, t.Chains[i].Rules, wantRules(want, wc), got)...)
	}
	// Sorted: map order is random and reports should be stable.
	for _, name := range slices.Sorted(maps.Keys(gotChains)) {
		drift = append(drift, fmt.Sprintf("chain %s is not part of the ruleset", name))
	}
	return drift, "", nil
}

func findSet(sets []*nftables.Set, name string) *nftables.Set {
	for _, s := range sets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// sameElements compares as multisets: the kernel lists elements in its own
// (backend-dependent) order.
func sameElements(got, want []nftables.SetElement) bool {
	if len(got) != len(want) {
		return false
	}
	key := func(e nftables.SetElement) string { return fmt.Sprintf("%x/%t", e.Key, e.IntervalEnd) }
	g, w := make([]string, len(got)), make([]string, len(want))
	for i := range got {
		g[i], w[i] = key(got[i]), key(want[i])
	}
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}

func chainHookDrift(got, want *nftables.Chain) string {
	val := func(c *nftables.Chain) string {
		if c.Hooknum == nil {
			return "regular chain"
		}
		var prio, policy int64
		if c.Priority != nil {
			prio = int64(*c.Priority)
		}
		if c.Policy != nil {
			policy = int64(*c.Policy)
		}
		return fmt.Sprintf("type %s hook %d priority %d policy %d", c.Type, *c.Hooknum, prio, policy)
	}
	if g, w := val(got), val(want); g != w {
		return fmt.Sprintf("is %s, want %s", g, w)
	}
	return ""
}

func wantRules(p program, c *nftables.Chain) []*nftables.Rule {
	var out []*nftables.Rule
	for _, r := range p.rules {
		if r.Chain == c {
			out = append(out, r)
		}
	}
	return out
}

// ruleDrift compares one chain's rules. model and want are the same rules,
// as the model (for their text) and as netlink values.
func ruleDrift(chainName string, model []nft.Rule, want, got []*nftables.Rule) []string {
	if len(got) == 0 && len(want) > 0 {
		return []string{fmt.Sprintf("chain %s is empty (flushed?): all %d rules missing", chainName, len(want))}
	}
	var drift []string
	byTag := make(map[string]*nftables.Rule, len(got))
	var gotOrder []string
	for _, g := range got {
		tag, ok := userdata.GetString(g.UserData, userdata.TypeComment)
		if !ok || byTag[tag] != nil || !slices.ContainsFunc(model, func(r nft.Rule) bool { return r.Tag == tag }) {
			drift = append(drift, fmt.Sprintf("chain %s: rule handle %d is not part of the ruleset (comment %q)", chainName, g.Handle, tag))
			continue
		}
		byTag[tag] = g
		gotOrder = append(gotOrder, tag)
	}
	var wantOrder []string
	for i, w := range want {
		m := model[i]
		wantOrder = append(wantOrder, m.Tag)
		g := byTag[m.Tag]
		switch {
		case g == nil:
			drift = append(drift, fmt.Sprintf("chain %s: rule %q is missing: %s", chainName, m.Tag, m.Text()))
		case !sameExprs(g.Exprs, w.Exprs):
			drift = append(drift, fmt.Sprintf("chain %s: rule %q (handle %d) was modified, want: %s", chainName, m.Tag, g.Handle, m.Text()))
		}
	}
	if len(drift) == 0 && !slices.Equal(gotOrder, wantOrder) {
		drift = append(drift, fmt.Sprintf("chain %s: rules are out of order", chainName))
	}
	return drift
}

// sameExprs compares what the kernel reports with what Apply sends,
// ignoring what the kernel does not echo back: the batch-local set ID of
// a lookup, and a redirect's max-port register, which it fills in with the
// min register when none was sent. google/nftables v0.3.0 also decodes
// neither a tproxy expression (it drops it from the rule) nor a ct
// expression's source register, so those are compared as far as it reads
// them: the port loaded for a tproxy is still compared, its family is not.
func sameExprs(got, want []expr.Any) bool {
	want = slices.DeleteFunc(slices.Clone(want), func(e expr.Any) bool { _, ok := e.(*expr.TProxy); return ok })
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !reflect.DeepEqual(normalise(got[i]), normalise(want[i])) {
			return false
		}
	}
	return true
}

func normalise(e expr.Any) expr.Any {
	switch e := e.(type) {
	case *expr.Lookup:
		c := *e
		c.SetID = 0
		return &c
	case *expr.Redir:
		c := *e
		if c.RegisterProtoMax == c.RegisterProtoMin {
			c.RegisterProtoMax = 0
		}
		return &c
	case *expr.Ct:
		c := *e
		if c.SourceRegister {
			c.SourceRegister, c.Register = false, 0
		}
		return &c
	}
	return e
}
