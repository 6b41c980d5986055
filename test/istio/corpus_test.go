package istio

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sidecarCase is one pod of the corpus: an injected pod with these
// annotations, istio-proxy env and ids, and these addresses.
type sidecarCase struct {
	name     string
	ann      map[string]string
	env      map[string]string
	uid, gid *int64
	ips      []netip.Addr
}

const (
	annMode        = "sidecar.istio.io/interceptionMode"
	annInCIDRs     = "traffic.sidecar.istio.io/includeOutboundIPRanges"
	annExCIDRs     = "traffic.sidecar.istio.io/excludeOutboundIPRanges"
	annInInbound   = "traffic.sidecar.istio.io/includeInboundPorts"
	annExInbound   = "traffic.sidecar.istio.io/excludeInboundPorts"
	annInOutbound  = "traffic.sidecar.istio.io/includeOutboundPorts"
	annExOutbound  = "traffic.sidecar.istio.io/excludeOutboundPorts"
	annExIfaces    = "traffic.sidecar.istio.io/excludeInterfaces"
	annReroute     = "istio.io/reroute-virtual-interfaces"
	annKubevirt    = "traffic.sidecar.istio.io/kubevirtInterfaces"
	envDNS         = "ISTIO_META_DNS_CAPTURE"
	envDualStack   = "ISTIO_DUAL_STACK"
	envInvalidDrop = "INVALID_DROP"
)

var (
	v4   = []netip.Addr{netip.MustParseAddr("10.0.0.5")}
	v6   = []netip.Addr{netip.MustParseAddr("fd00::5")}
	dual = []netip.Addr{netip.MustParseAddr("fd00::5"), netip.MustParseAddr("10.0.0.5")}
)

func a(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func id(v int64) *int64 { return &v }

// sidecarCorpus is every annotation and env var istio-cni reads, with the
// values where a reimplementation is likely to differ: blanks, empty
// strings, "*", port 0, IPv4-mapped ranges, bad values.
var sidecarCorpus = []sidecarCase{
	{name: "default-v4", ips: v4},
	{name: "default-v6", ips: v6},
	{name: "dual-stack", ips: dual},
	{name: "dual-stack-flag", env: a(envDualStack, "true"), ips: dual},
	{name: "dual-stack-flag-false", env: a(envDualStack, "false"), ips: dual},
	{name: "dual-stack-flag-invalid", env: a(envDualStack, "yes"), ips: dual},
	{name: "dual-stack-flag-v4-pod", env: a(envDualStack, "true"), ips: v4},
	{name: "no-pod-ips"},
	{name: "tproxy", ann: a(annMode, "TPROXY"), ips: v4},
	{name: "tproxy-dual-stack", ann: a(annMode, "TPROXY"), env: a(envDualStack, "true"), ips: dual},
	{name: "interception-none", ann: a(annMode, "NONE"), ips: v4},
	{name: "interception-lowercase", ann: a(annMode, "redirect"), ips: v4},
	{name: "inbound-list", ann: a(annInInbound, "8080,9090"), ips: v4},
	{name: "inbound-list-spaced", ann: a(annInInbound, " 8080, 9090 "), ips: v4},
	{name: "inbound-star", ann: a(annInInbound, "*"), ips: v4},
	{name: "inbound-star-spaced", ann: a(annInInbound, " * "), ips: v4},
	{name: "inbound-empty", ann: a(annInInbound, ""), ips: v4},
	{name: "inbound-blank", ann: a(annInInbound, " "), ips: v4},
	{name: "inbound-zero", ann: a(annInInbound, "0"), ips: v4},
	{name: "inbound-list-with-15020", ann: a(annInInbound, "15020,8080"), ips: v4},
	{name: "inbound-list-with-15008", ann: a(annInInbound, "15008,8080"), ips: v4},
	{name: "inbound-list-with-15008-tproxy", ann: a(annInInbound, "15008,8080", annMode, "TPROXY"), ips: v4},
	{name: "inbound-list-and-exclude", ann: a(annInInbound, "8080", annExInbound, "8080"), ips: v4},
	{name: "inbound-bad", ann: a(annInInbound, "http"), ips: v4},
	{name: "inbound-trailing-comma", ann: a(annInInbound, "8080,"), ips: v4},
	{name: "exclude-inbound", ann: a(annExInbound, "9000,9001"), ips: v4},
	{name: "exclude-inbound-spaced", ann: a(annExInbound, " 9000 , 9001"), ips: v4},
	{name: "exclude-inbound-trailing-comma", ann: a(annExInbound, "9000,"), ips: v4},
	{name: "exclude-inbound-star", ann: a(annExInbound, "*"), ips: v4},
	{name: "exclude-inbound-zero", ann: a(annExInbound, "0"), ips: v4},
	{name: "exclude-inbound-empty", ann: a(annExInbound, ""), ips: v4},
	{name: "exclude-inbound-tproxy", ann: a(annExInbound, "9000", annMode, "TPROXY"), ips: v4},
	{name: "exclude-inbound-65536", ann: a(annExInbound, "65536"), ips: v4},
	{name: "exclude-inbound-blank", ann: a(annExInbound, " "), ips: v4},
	{name: "include-outbound-ports-blank", ann: a(annInOutbound, " "), ips: v4},
	{name: "exclude-outbound-ports-blank", ann: a(annExOutbound, "  "), ips: v4},
	{name: "include-outbound-ports-spaced", ann: a(annInOutbound, " 443 ,80"), ips: v4},
	{name: "include-outbound-ports", ann: a(annInOutbound, "443,80"), ips: v4},
	{name: "include-outbound-ports-star", ann: a(annInOutbound, "*"), ips: v4},
	{name: "include-outbound-ports-zero", ann: a(annInOutbound, "0"), ips: v4},
	{name: "exclude-outbound-ports", ann: a(annExOutbound, "5432"), ips: v4},
	{name: "exclude-outbound-ports-empty", ann: a(annExOutbound, ""), ips: v4},
	{name: "exclude-outbound-ports-double-comma", ann: a(annExOutbound, "80,,443"), ips: v4},
	{name: "exclude-outbound-ports-negative", ann: a(annExOutbound, "-1"), ips: v4},
	{name: "cidrs", ann: a(annInCIDRs, "10.0.0.0/8,192.168.1.7/24"), ips: v4},
	{name: "cidrs-v6-on-v4-pod", ann: a(annInCIDRs, "fd00::/8"), ips: v4},
	{name: "cidrs-dual-stack", ann: a(annInCIDRs, "10.0.0.0/8,fd00::/8"), env: a(envDualStack, "true"), ips: dual},
	{name: "cidrs-v4-only-on-v6-pod", ann: a(annInCIDRs, "10.0.0.0/8"), ips: v6},
	{name: "cidrs-spaced", ann: a(annInCIDRs, "10.0.0.0/8, 192.168.0.0/16"), ips: v4},
	{name: "cidrs-star", ann: a(annInCIDRs, "*"), ips: v4},
	{name: "cidrs-star-spaced", ann: a(annInCIDRs, " *"), ips: v4},
	{name: "cidrs-empty", ann: a(annInCIDRs, ""), ips: v4},
	{name: "cidrs-blank", ann: a(annInCIDRs, " "), ips: v4},
	{name: "cidrs-bare-address", ann: a(annInCIDRs, "10.0.0.1"), ips: v4},
	{name: "cidrs-ipv4-mapped-v4-pod", ann: a(annInCIDRs, "::ffff:10.0.0.0/104"), ips: v4},
	{name: "cidrs-ipv4-mapped-v6-pod", ann: a(annInCIDRs, "::ffff:10.0.0.0/104,fd00::/8"), ips: v6},
	{name: "cidrs-loopback", ann: a(annInCIDRs, "127.0.0.1/32,10.0.0.0/8"), ips: v4},
	{name: "cidrs-host-bits", ann: a(annInCIDRs, "10.1.2.3/8"), ips: v4},
	{name: "cidrs-empty-with-ports", ann: a(annInCIDRs, "", annInOutbound, "443"), ips: v4},
	{name: "exclude-cidrs", ann: a(annExCIDRs, "169.254.169.254/32,fd00:1::/64"), env: a(envDualStack, "true"), ips: dual},
	{name: "exclude-cidrs-star", ann: a(annExCIDRs, "*"), ips: v4},
	{name: "exclude-cidrs-empty", ann: a(annExCIDRs, ""), ips: v4},
	{name: "exclude-cidrs-trailing-comma", ann: a(annExCIDRs, "10.0.0.0/8,"), ips: v4},
	{name: "dns", env: a(envDNS, "true"), ips: v4},
	{name: "dns-false", env: a(envDNS, "false"), ips: v4},
	{name: "dns-invalid", env: a(envDNS, "maybe"), ips: v4},
	{name: "invalid-drop", env: a(envInvalidDrop, "true"), ips: v4},
	{name: "invalid-drop-invalid", env: a(envInvalidDrop, "on"), ips: v4},
	{name: "proxy-ids", uid: id(2000), gid: id(3000), ips: v4},
	{name: "proxy-uid-only", uid: id(2000), ips: v4},
	{name: "proxy-ids-zero", uid: id(0), gid: id(0), ips: v4},
	{name: "exclude-interfaces", ann: a(annExIfaces, "eth1, net1"), ips: v4},
	{name: "exclude-interfaces-digit", ann: a(annExIfaces, "1eth"), ips: v4},
	{name: "exclude-interfaces-trailing-comma", ann: a(annExIfaces, "eth1,"), ips: v4},
	{name: "exclude-interfaces-too-long", ann: a(annExIfaces, "averyveryverylongname"), ips: v4},
	{name: "reroute", ann: a(annReroute, "net1"), ips: v4},
	{name: "reroute-kubevirt", ann: a(annKubevirt, "net1,net2"), ips: v4},
	{name: "reroute-empty-wins", ann: a(annReroute, "", annKubevirt, "net1"), ips: v4},
	{name: "reroute-bad", ann: a(annReroute, "net 1"), ips: v4},
	{name: "reroute-with-cidrs", ann: a(annReroute, "net1", annInCIDRs, "10.0.0.0/8"), ips: v4},
	{name: "reroute-tproxy", ann: a(annReroute, "net1", annMode, "TPROXY"), ips: v4},
	{name: "everything", ann: a(annMode, "TPROXY", annInCIDRs, "10.0.0.0/8,fd00::/8", annExCIDRs, "10.1.0.0/16",
		annInInbound, "*", annExInbound, "9000", annInOutbound, "8443", annExOutbound, "5432,15020", annExIfaces, "eth1"),
		env: a(envDNS, "true", envDualStack, "true", envInvalidDrop, "true"), uid: id(1500), gid: id(1500), ips: dual},
}

// pod is c as the injector leaves a pod: the status annotation and an
// istio-proxy container running "proxy sidecar".
func (c sidecarCase) pod() *corev1.Pod {
	ann := a("sidecar.istio.io/status", `{"containers":["istio-proxy"]}`)
	for k, v := range c.ann {
		ann[k] = v
	}
	proxy := corev1.Container{Name: "istio-proxy", Args: []string{"proxy", "sidecar"}}
	for k, v := range c.env {
		proxy.Env = append(proxy.Env, corev1.EnvVar{Name: k, Value: v})
	}
	if c.uid != nil || c.gid != nil {
		proxy.SecurityContext = &corev1.SecurityContext{RunAsUser: c.uid, RunAsGroup: c.gid}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: c.name, Annotations: ann},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}, proxy}},
	}
}
