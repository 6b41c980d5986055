// Package istioadopt finds the traffic capture istio-cni (or Istio's
// istio-init container) left in a pod's network namespace, and removes it
// once sluice's own table is in, so a node can move from istio-cni to
// sluice without restarting its pods.
//
// It reads and changes the kernel over netlink only, never by running
// `nft` or `iptables`, and so it sees what nf_tables holds:
//   - Istio's native nftables mode: the inet tables istio-proxy-nat,
//     istio-proxy-mangle, istio-proxy-raw (sidecar) and istio-ambient-nat,
//     istio-ambient-mangle, istio-ambient-raw (ambient in-pod), as named in
//     Istio's tools/istio-nftables and cni/pkg/nftables;
//   - Istio's iptables rules written by iptables-nft: the ISTIO_* chains
//     (ISTIO_OUTPUT, ISTIO_INBOUND, ISTIO_PRERT, ...) in the ip and ip6
//     tables nat, mangle and raw, and the rules in other chains of those
//     tables that jump to them.
//
// Rules written by iptables-legacy live in x_tables, which netlink cannot
// read: a pod captured that way looks uncaptured here. That is a known
// limit, pinned by a test and written in docs/adopt-istio-cni.md.
//
// Removal is scoped to what Istio made: jumps into ISTIO_* chains by rule
// handle, those chains flushed and deleted, Istio's inet tables deleted;
// iptables-nft's base chains stay, and a jump added after detection fails
// the whole batch. Istio's ip rules, routes and ::6 are left: they carry
// the same marks and tables and route only marked packets. An ambient pod
// is adopted only once a ztunnel holds its snapshot (re-checked every
// 0.5 s), and Pending lists the pods istio-cni enrolled that sluice has
// not adopted yet, by the same proof.
package istioadopt

import (
	"fmt"
	"strings"
)

// Family is an nf_tables family as `nft` names it.
type Family string

const (
	INet Family = "inet"
	IPv4 Family = "ip"
	IPv6 Family = "ip6"
)

// The native tables Istio creates in a pod's netns.
var nativeTables = []string{
	"istio-proxy-nat", "istio-proxy-mangle", "istio-proxy-raw",
	"istio-ambient-nat", "istio-ambient-mangle", "istio-ambient-raw",
}

// iptablesTables are the iptables tables Istio's rules live in.
var iptablesTables = []string{"nat", "mangle", "raw"}

// chainPrefix starts every chain Istio's iptables rules create.
const chainPrefix = "ISTIO_"

// Table names one nf_tables table.
type Table struct {
	Family Family
	Name   string
}

func (t Table) String() string { return string(t.Family) + " " + t.Name }

// Jump is a rule outside Istio's chains that sends packets into one of
// them (`-A OUTPUT -j ISTIO_OUTPUT`), found by its handle.
type Jump struct {
	Table  Table
	Chain  string
	Handle uint64
	Target string
}

// Capture is what Istio left in one netns. The zero value is "nothing".
type Capture struct {
	// Tables are Istio's native nftables tables, removed whole.
	Tables []Table
	// Chains are the ISTIO_* chains iptables-nft made, per table.
	Chains []Chain
	// Jumps are the rules that enter Chains from the tables' other chains.
	Jumps []Jump
}

// Chain names one ISTIO_* chain.
type Chain struct {
	Table Table
	Name  string
}

// Found reports whether Istio's capture is there.
func (c Capture) Found() bool { return len(c.Tables) > 0 || len(c.Chains) > 0 }

// String lists what was found, for logs and Events: "inet istio-proxy-nat,
// ip nat ISTIO_OUTPUT".
func (c Capture) String() string {
	var parts []string
	for _, t := range c.Tables {
		parts = append(parts, t.String())
	}
	for _, ch := range c.Chains {
		parts = append(parts, fmt.Sprintf("%s %s", ch.Table, ch.Name))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func isIstioChain(name string) bool { return strings.HasPrefix(name, chainPrefix) }
