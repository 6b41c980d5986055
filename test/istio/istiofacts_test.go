package istio

import (
	"net/netip"
	"strconv"
	"strings"
)

// istioFacts reads istio-iptables' rules into facts.
func istioFacts(v4text, v6text string) facts {
	v4, v6 := parseRestore(v4text), parseRestore(v6text)
	if err := badPort(append(v4, v6...)); err != nil {
		return failed()
	}
	f := facts{"result": "capture", "ipv6": strconv.FormatBool(v6text != "")}
	f["interception"], f["inbound"] = inboundFacts(v4)
	f["outbound-v4"], f["exclude-v4"] = outboundCIDRFacts(v4, "127.0.0.1/32")
	f["outbound-v6"], f["exclude-v6"] = "-", "-"
	if v6text != "" {
		f["outbound-v6"], f["exclude-v6"] = outboundCIDRFacts(v6, "::1/128")
	}
	var inc, exc []int
	var excIf, rerouteIf []string
	f["app-loopback-return"] = "false"
	f["dns"], f["drop-invalid"] = "false", "false"
	for _, r := range v4 {
		port, hasPort := r.opt("--dport")
		n, _ := strconv.Atoi(port)
		switch {
		case r.table == "nat" && r.chain == "ISTIO_OUTPUT" && hasPort && r.has("tcp") && r.target() == "RETURN":
			exc = append(exc, n)
		case r.table == "nat" && r.chain == "ISTIO_OUTPUT" && hasPort && r.target() == "ISTIO_REDIRECT":
			inc = append(inc, n)
		case r.table == "nat" && r.chain == "ISTIO_OUTPUT" && r.has("!") && r.has("--uid-owner") && r.target() == "RETURN":
			f["app-loopback-return"] = "true"
		case r.table == "nat" && r.chain == "ISTIO_OUTPUT" && r.target() == "RETURN" && len(r.args) == 6 && r.args[2] == "--uid-owner":
			f["uid"] = r.args[3] // -m owner --uid-owner N -j RETURN
		case r.table == "nat" && r.chain == "ISTIO_OUTPUT" && r.target() == "RETURN" && len(r.args) == 6 && r.args[2] == "--gid-owner":
			f["gid"] = r.args[3]
		case r.chain == "ISTIO_OUTPUT_DNS":
			f["dns"] = "true"
		case r.chain == "ISTIO_DROP":
			f["drop-invalid"] = "true"
		case r.table == "nat" && r.chain == "PREROUTING" && r.target() == "RETURN":
			if i, ok := r.opt("-i"); ok {
				excIf = append(excIf, i)
			}
		case r.table == "nat" && r.chain == "PREROUTING" && r.target() == "ISTIO_REDIRECT":
			if i, ok := r.opt("-i"); ok {
				rerouteIf = append(rerouteIf, i)
			}
		}
	}
	f["include-ports"], f["exclude-ports"] = portList(inc), portList(exc)
	// A reroute interface also gets a RETURN, inserted ahead of its jumps.
	excIf = removeAll(excIf, rerouteIf)
	f["exclude-interfaces"], f["reroute-interfaces"] = nameList(excIf), nameList(rerouteIf)
	f["reroute-to"] = "-"
	switch {
	case len(rerouteIf) == 0:
	case f["interception"] == "TPROXY" && strings.HasPrefix(f["inbound"], "all"):
		// mangle PREROUTING sends every TCP packet, from any interface, to
		// ISTIO_INBOUND's TPROXY before nat PREROUTING's reroute jump.
		f["reroute-to"] = rerouteInbound
	default:
		f["reroute-to"] = rerouteOutbound
	}
	return f
}

// inboundFacts reads ISTIO_INBOUND in the table PREROUTING jumps to it
// from: the interception mode, and which ports are captured, in rule
// order (a port returned before any rule captures it passes).
func inboundFacts(rules []rule) (mode, inbound string) {
	table := ""
	for _, r := range rules {
		if r.chain == "PREROUTING" && r.target() == "ISTIO_INBOUND" && r.has("tcp") {
			table = r.table
		}
	}
	if table == "" {
		return "-", "none"
	}
	mode = map[string]string{"nat": "REDIRECT", "mangle": "TPROXY"}[table]
	returned, captured := map[int]bool{}, map[int]bool{}
	for _, r := range rules {
		if r.table != table || r.chain != "ISTIO_INBOUND" || !r.has("tcp") {
			continue
		}
		if r.has("-s") || r.has("-i") || r.has("--mark") {
			continue // the proxy's own and the app's loopback traffic
		}
		capture := r.target() == "ISTIO_IN_REDIRECT" || r.target() == "ISTIO_TPROXY" || r.target() == "ISTIO_DIVERT"
		port, hasPort := r.opt("--dport")
		n, _ := strconv.Atoi(port)
		switch {
		case hasPort && r.target() == "RETURN" && !captured[n]:
			returned[n] = true
		case hasPort && capture && !returned[n]:
			captured[n] = true
		case !hasPort && capture:
			return mode, "all except " + portList(keys(returned))
		}
	}
	if l := portList(keys(captured)); l != "[]" {
		return mode, "only " + l
	}
	// A jump to a chain that captures nothing: no interception at all.
	return "-", "none"
}

// outboundCIDRFacts reads ISTIO_OUTPUT's destination rules: what is
// captured by address and what is excluded (less the localhost rule every
// pod has).
func outboundCIDRFacts(rules []rule, localhost string) (include, exclude string) {
	var inc, exc []netip.Prefix
	all := false
	for _, r := range rules {
		if r.table != "nat" || r.chain != "ISTIO_OUTPUT" {
			continue
		}
		d, hasD := r.opt("-d")
		_, hasPort := r.opt("--dport")
		switch {
		case r.target() == "ISTIO_REDIRECT" && !hasD && !hasPort && len(r.args) == 2:
			all = true
		case r.target() == "ISTIO_REDIRECT" && hasD:
			inc = append(inc, netip.MustParsePrefix(d))
		case r.target() == "RETURN" && hasD && !r.has("-o") && d != localhost:
			exc = append(exc, netip.MustParsePrefix(d))
		}
	}
	switch {
	case all:
		include = "all"
	case len(inc) == 0:
		include = "none"
	default:
		include = prefixList(inc)
	}
	return include, prefixList(exc)
}

func keys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func removeAll(from, drop []string) []string {
	var out []string
	for _, s := range from {
		keep := true
		for _, d := range drop {
			keep = keep && !strings.EqualFold(s, d)
		}
		if keep {
			out = append(out, s)
		}
	}
	return out
}
