package istio

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// facts is what a pod's capture means, in words both sides can be reduced
// to: one value per aspect, compared as strings. An aspect that does not
// apply (an IPv6 list when IPv6 is off) is "-".
type facts map[string]string

// aspects is the order the table prints them in.
var aspects = []string{
	"result", "interception", "inbound", "outbound-v4", "outbound-v6", "exclude-v4", "exclude-v6",
	"include-ports", "exclude-ports", "app-loopback-return", "uid", "gid", "dns", "drop-invalid",
	"exclude-interfaces", "reroute-interfaces", "reroute-to", "ipv6",
}

// Where TCP from a reroute interface (a KubeVirt guest's own outbound
// connections) is sent.
const (
	rerouteOutbound = "15001 as outbound, original destination kept"
	rerouteInbound  = "15006 as inbound (TPROXY in mangle runs before the nat reroute)"
)

// failed is the facts of a pod whose ADD fails: nothing else matters.
func failed() facts { return facts{"result": "error"} }

func portList(ports []int) string {
	ports = slices.Clone(ports)
	ports = slices.DeleteFunc(ports, func(p int) bool { return p == 0 }) // port 0 matches no packet
	slices.Sort(ports)
	ports = slices.Compact(ports)
	if len(ports) == 0 {
		return "[]"
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprint(p)
	}
	return "[" + strings.Join(s, ",") + "]"
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, 0, len(ps))
	for _, p := range ps {
		s = append(s, p.Masked().String())
	}
	sort.Strings(s)
	s = slices.Compact(s)
	return "[" + strings.Join(s, ",") + "]"
}

func nameList(names []string) string {
	names = slices.Clone(names)
	sort.Strings(names)
	return "[" + strings.Join(slices.Compact(names), ",") + "]"
}

// diff lists the aspects where a and b differ.
func diff(a, b facts) []string {
	if a["result"] != b["result"] {
		return []string{"result"} // an ADD that fails has no other aspect
	}
	var out []string
	for _, k := range aspects {
		if a[k] != b[k] {
			out = append(out, k)
		}
	}
	return out
}
