package redirect

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// TableName is the one nftables table sluice owns in a pod's netns, in the
// inet family so a single ruleset covers IPv4 and IPv6.
const TableName = "sluice"

// HostTableName is the table sluice owns in the node's netns (host.go).
const HostTableName = "sluice-host"

// Ruleset is the whole table inet sluice for one pod (an nft.Table: named
// sets, then chains of rules), and the policy routes some modes need beside
// it. It is the single description both the text (Render) and the netlink
// messages (Apply, Verify) are produced from, so the two cannot disagree. A
// Ruleset is immutable once built and safe to share between goroutines.
type Ruleset struct {
	table  *nft.Table
	routes []policyRoute
	// loAddrs are /128 addresses lo must have (Envoy's ::6).
	loAddrs []netip.Addr
	ipv4    bool   // IPv4 is captured: what is left when lo has no IPv6
	text    string // the rendering, computed once by Build
}

// Render is the ruleset as `nft list table inet sluice` prints it. When the
// mode needs policy routing (TPROXY, ambient), the ip rules and routes
// follow the table as `#` comment lines in `ip` syntax, so the text stays
// valid `nft -f` input and still shows everything Apply programs.
func (r *Ruleset) Render() string { return r.text }

// Hash identifies the ruleset: the sha256 (hex) of its rendering.
func (r *Ruleset) Hash() string {
	sum := sha256.Sum256([]byte(r.text))
	return hex.EncodeToString(sum[:])
}

// policyRoute is `ip rule add fwmark mark/mask lookup table pref priority`
// and `ip route add local default dev lo table table` for one family: a
// packet carrying the mark is delivered locally whatever its destination,
// which is how TPROXY-ed packets and replies to transparent sockets reach
// the proxy.
type policyRoute struct {
	fam      nft.Family
	mark     uint32
	mask     uint32
	table    uint32
	priority uint32
	// What an Apply added, to take back when it fails: only the rule,
	// or only the route, of this family and table.
	ruleOnly, routeOnly bool
}

// renderRoutes writes the policy routes and lo's addresses as `ip`
// commands in nft comments.
func renderRoutes(routes []policyRoute, addrs []netip.Addr) string {
	var b strings.Builder
	if len(routes) > 0 {
		b.WriteString("# policy routing, programmed with the table:\n")
	}
	for _, r := range routes {
		fmt.Fprintf(&b, "# ip %s rule add fwmark %#x/%#x lookup %d pref %d\n", ipFlag(r.fam), r.mark, r.mask, r.table, r.priority)
		fmt.Fprintf(&b, "# ip %s route add local %s dev %s table %d\n", ipFlag(r.fam), defaultPrefix(r.fam), loopbackInterface, r.table)
	}
	if len(addrs) > 0 {
		b.WriteString("# addresses, programmed with the table:\n")
	}
	for _, a := range addrs {
		fmt.Fprintf(&b, "# ip -6 addr add %s/128 dev %s\n", a, loopbackInterface)
	}
	return b.String()
}

// ipFlag is the `ip` command's family option.
func ipFlag(f nft.Family) string {
	if f == nft.IPv6 {
		return "-6"
	}
	return "-4"
}

func defaultPrefix(f nft.Family) string {
	if f == nft.IPv6 {
		return "::/0"
	}
	return "0.0.0.0/0"
}
