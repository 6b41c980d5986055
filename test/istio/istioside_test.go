package istio

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"istio.io/istio/cni/pkg/plugin"
	istiolog "istio.io/istio/pkg/log"
	"istio.io/istio/tools/common/config"
	"istio.io/istio/tools/istio-iptables/pkg/capture"
	"istio.io/istio/tools/istio-iptables/pkg/constants"
	dep "istio.io/istio/tools/istio-iptables/pkg/dependencies"
)

// recorder stands in for iptables: it keeps what istio-iptables would
// have fed iptables-restore and ip6tables-restore.
type recorder struct {
	v4, v6 string
}

func (r *recorder) Run(_ *istiolog.Scope, _ bool, cmd constants.IptablesCmd, ver *dep.IptablesVersion, stdin io.ReadSeeker, _ ...string) (*bytes.Buffer, error) {
	if cmd == constants.IPTablesRestore && stdin != nil {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(ver.DetectedBinary, "ip6") {
			r.v6 += string(b)
		} else {
			r.v4 += string(b)
		}
	}
	return &bytes.Buffer{}, nil
}

func (r *recorder) DetectIptablesVersion(ipV6 bool) (dep.IptablesVersion, error) {
	if ipV6 {
		return dep.IptablesVersion{DetectedBinary: "ip6tables", DetectedSaveBinary: "ip6tables-save", DetectedRestoreBinary: "ip6tables-restore"}, nil
	}
	return dep.IptablesVersion{DetectedBinary: "iptables", DetectedSaveBinary: "iptables-save", DetectedRestoreBinary: "iptables-restore"}, nil
}

// istioMu serialises istioRules: it swaps a package variable of Istio's.
var istioMu sync.Mutex

// istioRules runs istio-cni's sidecar path on pod as its plugin does
// (ExtractPodInfo, NewRedirect, then the same istio-iptables config its
// iptables rule manager builds), with the pod's addresses as the netns
// would list them, and returns the iptables-restore input for each family
// ("" for IPv6 when istio-iptables leaves it alone), and the config it
// ran with.
func istioRules(pod *corev1.Pod, ips []netip.Addr) (v4, v6 string, cfg *config.Config, err error) {
	rd, err := plugin.NewRedirect(plugin.ExtractPodInfo(pod))
	if err != nil {
		return "", "", nil, fmt.Errorf("NewRedirect: %w", err)
	}
	f := reflect.ValueOf(rd).Elem()
	str := func(name string) string { return f.FieldByName(name).String() }
	boolean := func(name string) bool { return f.FieldByName(name).Bool() }

	cfg = config.DefaultConfig()
	cfg.HostFilesystemPodNetwork = true
	cfg.ProxyPort = str("targetPort")
	cfg.ProxyUID = str("noRedirectUID")
	cfg.ProxyGID = str("noRedirectGID")
	cfg.InboundInterceptionMode = str("redirectMode")
	cfg.OutboundIPRangesInclude = str("includeIPCidrs")
	cfg.InboundPortsExclude = str("excludeInboundPorts")
	cfg.InboundPortsInclude = str("includeInboundPorts")
	cfg.ExcludeInterfaces = str("excludeInterfaces")
	cfg.OutboundPortsExclude = str("excludeOutboundPorts")
	cfg.OutboundPortsInclude = str("includeOutboundPorts")
	cfg.OutboundIPRangesExclude = str("excludeIPCidrs")
	cfg.RerouteVirtualInterfaces = str("rerouteVirtualInterfaces")
	cfg.RedirectDNS = boolean("dnsRedirect")
	cfg.CaptureAllDNS = boolean("dnsRedirect")
	cfg.DropInvalid = boolean("invalidDrop")
	cfg.DualStack = boolean("dualStack")

	istioMu.Lock()
	defer istioMu.Unlock()
	saved := config.LocalIPAddrs
	defer func() { config.LocalIPAddrs = saved }()
	config.LocalIPAddrs = func() ([]net.Addr, error) { return netAddrs(ips), nil }
	if err := cfg.FillConfigFromEnvironment(); err != nil {
		return "", "", nil, fmt.Errorf("istio-iptables config: %w", err)
	}
	rec := &recorder{}
	ipt, err := capture.NewIptablesConfigurator(cfg, rec)
	if err != nil {
		return "", "", nil, err
	}
	if err := ipt.Run(); err != nil {
		return "", "", nil, fmt.Errorf("istio-iptables: %w", err)
	}
	return rec.v4, rec.v6, cfg, nil
}

// netAddrs lists ips as net.InterfaceAddrs would in the pod: the kernel
// dumps IPv4 addresses before IPv6 ones, loopback first.
func netAddrs(ips []netip.Addr) []net.Addr {
	out := []net.Addr{&net.IPNet{IP: net.IPv4(127, 0, 0, 1), Mask: net.CIDRMask(8, 32)}}
	for _, v6 := range []bool{false, true} {
		for _, ip := range ips {
			if ip.Unmap().Is6() == v6 {
				bits := 32
				if v6 {
					bits = 128
				}
				out = append(out, &net.IPNet{IP: net.IP(ip.AsSlice()), Mask: net.CIDRMask(bits, bits)})
			}
		}
	}
	return out
}

// rule is one iptables-restore line, tokenised as iptables-restore does.
type rule struct {
	table, chain string
	args         []string
}

func parseRestore(text string) []rule {
	var out []rule
	table := ""
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "*" && len(f) > 1:
			table = f[1]
		case f[0] == "-A" && len(f) > 1:
			out = append(out, rule{table, f[1], f[2:]})
		case f[0] == "-I" && len(f) > 2:
			out = append(out, rule{table, f[1], f[3:]})
		}
	}
	return out
}

func (r rule) opt(name string) (string, bool) {
	for i := 0; i+1 < len(r.args); i++ {
		if r.args[i] == name && (i == 0 || r.args[i-1] != "!") {
			return r.args[i+1], true
		}
	}
	return "", false
}

func (r rule) has(tok string) bool {
	for _, a := range r.args {
		if a == tok {
			return true
		}
	}
	return false
}

func (r rule) target() string { t, _ := r.opt("-j"); return t }

// badPort says whether iptables would refuse the port arguments of rules
// ("--dport *" from a "*" in a list istio-iptables does not expand).
func badPort(rules []rule) error {
	for _, r := range rules {
		for _, o := range []string{"--dport", "--sport"} {
			if v, ok := r.opt(o); ok {
				if _, err := strconv.ParseUint(v, 10, 16); err != nil {
					return fmt.Errorf("iptables-restore refuses %s %q", o, v)
				}
			}
		}
	}
	return nil
}
