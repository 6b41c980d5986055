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
// messages (Kernel's Apply, Verify) are produced from, so the two cannot
// disagree. A
// Ruleset is immutable once built and safe to share between goroutines.
type Ruleset struct {
	table  *nft.Table
	routes []PolicyRoute
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

// Table is the nftables table. Like the Ruleset, it is not to be changed.
func (r *Ruleset) Table() *nft.Table { return r.table }

// Routes are the policy routes programmed beside the table (TPROXY,
// ambient), none for the other modes.
func (r *Ruleset) Routes() []PolicyRoute { return r.routes }

// LoopbackAddrs are the /128 addresses lo must have (Envoy's ::6).
func (r *Ruleset) LoopbackAddrs() []netip.Addr { return r.loAddrs }

// IPv4 says IPv4 is captured: what is left to program when lo has IPv6
// disabled.
func (r *Ruleset) IPv4() bool { return r.ipv4 }

// Hash identifies the ruleset: the sha256 (hex) of its rendering.
func (r *Ruleset) Hash() string {
	sum := sha256.Sum256([]byte(r.text))
	return hex.EncodeToString(sum[:])
}

// PolicyRoute is `ip rule add fwmark Mark/Mask lookup Table pref Priority`
// and `ip route add local default dev lo table Table` for one family: a
// packet carrying the mark is delivered locally whatever its destination,
// which is how TPROXY-ed packets and replies to transparent sockets reach
// the proxy.
type PolicyRoute struct {
	Family   nft.Family
	Mark     uint32
	Mask     uint32
	Table    uint32
	Priority uint32
}

// renderRoutes writes the policy routes and lo's addresses as `ip`
// commands in nft comments.
func renderRoutes(routes []PolicyRoute, addrs []netip.Addr) string {
	var b strings.Builder
	if len(routes) > 0 {
		b.WriteString("# policy routing, programmed with the table:\n")
	}
	for _, r := range routes {
		fmt.Fprintf(&b, "# ip %s rule add fwmark %#x/%#x lookup %d pref %d\n", r.IPFlag(), r.Mark, r.Mask, r.Table, r.Priority)
		fmt.Fprintf(&b, "# ip %s route add local %s dev %s table %d\n", r.IPFlag(), r.DefaultPrefix(), LoopbackInterface, r.Table)
	}
	if len(addrs) > 0 {
		b.WriteString("# addresses, programmed with the table:\n")
	}
	for _, a := range addrs {
		fmt.Fprintf(&b, "# ip -6 addr add %s/128 dev %s\n", a, LoopbackInterface)
	}
	return b.String()
}

// IPFlag is the `ip` command's option for r's family.
func (r PolicyRoute) IPFlag() string {
	if r.Family == nft.IPv6 {
		return "-6"
	}
	return "-4"
}

// DefaultPrefix is the default route's prefix in r's family.
func (r PolicyRoute) DefaultPrefix() string {
	if r.Family == nft.IPv6 {
		return "::/0"
	}
	return "0.0.0.0/0"
}
