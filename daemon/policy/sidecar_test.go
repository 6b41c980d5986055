package policy

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

func ptr[T any](v T) *T { return &v }

// injected is a pod as Istio's injector leaves it: status annotation and an
// istio-proxy container running "proxy sidecar".
func injected(edit func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   "shop",
			Name:        "cart",
			Annotations: map[string]string{annSidecarStatus: `{"containers":["istio-proxy"]}`},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: "app"},
			{Name: containerProxy, Image: "proxyv2", Args: []string{"proxy", "sidecar"}},
		}},
	}
	if edit != nil {
		edit(p)
	}
	return p
}

func proxyOf(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[1] }

func TestDecideSidecarSkips(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		ns   *corev1.Namespace
		why  string
	}{
		{"host network", injected(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), nil, "host-network"},
		{"inject annotation false", injected(func(p *corev1.Pod) { p.Annotations[annSidecarInject] = "false" }), nil, "inject is false"},
		{"inject label false wins over annotation true", injected(func(p *corev1.Pod) {
			p.Annotations[annSidecarInject] = "true"
			p.Labels = map[string]string{annSidecarInject: "false"}
		}), nil, "inject is false"},
		{"not injected", injected(func(p *corev1.Pod) { delete(p.Annotations, annSidecarStatus) }), nil, "not injected"},
		{"ambient namespace", injected(func(p *corev1.Pod) { delete(p.Annotations, annSidecarStatus) }),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{labelDataplaneMode: "ambient"}}}, "ambient"},
		{"istio-init", injected(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: containerInit}}
		}), nil, "istio-init"},
		{"no proxy container", injected(func(p *corev1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] }), nil, "no istio-proxy"},
		{"DISABLE_ENVOY", injected(func(p *corev1.Pod) {
			proxyOf(p).Env = []corev1.EnvVar{{Name: envDisableEnvoy, Value: "true"}}
		}), nil, "DISABLE_ENVOY"},
		{"gateway", injected(func(p *corev1.Pod) { proxyOf(p).Args = []string{"proxy", "router"} }), nil, "proxy type router"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := decideSidecar(tc.pod, tc.ns, redirect.DefaultSpec(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.Capture || !strings.Contains(d.Reason, tc.why) {
				t.Errorf("decision %+v: want pass-through saying %q", d, tc.why)
			}
		})
	}
}

func TestDecideSidecarCaptures(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want func(*redirect.Spec)
	}{
		{"defaults", injected(nil), nil},
		{"inject label true wins over annotation false", injected(func(p *corev1.Pod) {
			p.Annotations[annSidecarInject] = "false"
			p.Labels = map[string]string{annSidecarInject: "true"}
		}), nil},
		{"inject not a boolean opts nothing out", injected(func(p *corev1.Pod) { p.Annotations[annSidecarInject] = "maybe" }), nil},
		{"DISABLE_ENVOY false", injected(func(p *corev1.Pod) {
			proxyOf(p).Env = []corev1.EnvVar{{Name: envDisableEnvoy, Value: "false"}}
		}), nil},
		{"native sidecar", injected(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{*proxyOf(p)}
			p.Spec.InitContainers[0].RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
			p.Spec.Containers = p.Spec.Containers[:1]
		}), nil},
		{"proxy uid and gid", injected(func(p *corev1.Pod) {
			proxyOf(p).SecurityContext = &corev1.SecurityContext{RunAsUser: ptr(int64(2000)), RunAsGroup: ptr(int64(3000))}
		}), func(s *redirect.Spec) { s.ProxyUID, s.ProxyGID = 2000, 3000 }},
		{"proxy uid 0 means the default", injected(func(p *corev1.Pod) {
			proxyOf(p).SecurityContext = &corev1.SecurityContext{RunAsUser: ptr(int64(0))}
		}), nil},
		{"dns capture", injected(func(p *corev1.Pod) {
			proxyOf(p).Env = []corev1.EnvVar{{Name: envDNSCapture, Value: "true"}}
		}), func(s *redirect.Spec) { s.CaptureDNS = true }},
		{"dns capture not a boolean is false", injected(func(p *corev1.Pod) {
			proxyOf(p).Env = []corev1.EnvVar{{Name: envDNSCapture, Value: "yes please"}}
		}), nil},
		{"annotations", injected(func(p *corev1.Pod) { p.Annotations[annIncludeInboundPorts] = "8080" }),
			func(s *redirect.Spec) { s.IncludeInboundPorts, s.InboundPassPorts = []uint16{8080}, []uint16{15008} }},
		{"invalid drop", injected(func(p *corev1.Pod) {
			proxyOf(p).Env = []corev1.EnvVar{{Name: envInvalidDrop, Value: "true"}}
		}), func(s *redirect.Spec) { s.DropInvalid = true }},
		{"invalid drop not a boolean is false", injected(func(p *corev1.Pod) {
			proxyOf(p).Env = []corev1.EnvVar{{Name: envInvalidDrop, Value: "on"}}
		}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := decideSidecar(tc.pod, nil, redirect.DefaultSpec(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Capture {
				t.Fatalf("passed through: %s", d.Reason)
			}
			if w := want(tc.want); !reflect.DeepEqual(d.Spec, w) {
				t.Errorf("spec\n got %+v\nwant %+v", d.Spec, w)
			}
			if len(d.Inputs) == 0 || !strings.Contains(d.Inputs[0], annSidecarStatus) {
				t.Errorf("inputs %q: want the status annotation first", d.Inputs)
			}
		})
	}
}

func TestDecideSidecarInvalid(t *testing.T) {
	pod := injected(func(p *corev1.Pod) { p.Annotations[annExcludeOutboundPorts] = "80,http" })
	_, err := decideSidecar(pod, nil, redirect.DefaultSpec(), nil)
	if err == nil || !strings.Contains(err.Error(), annExcludeOutboundPorts) || !strings.Contains(err.Error(), `"http"`) {
		t.Errorf("got %v, want an error naming the annotation and the bad value", err)
	}
}

func TestSidecarFamilies(t *testing.T) {
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	dualStackEnv := func(v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { proxyOf(p).Env = []corev1.EnvVar{{Name: envDualStack, Value: v}} }
	}
	for _, tc := range []struct {
		name     string
		edit     func(*corev1.Pod)
		ips      []netip.Addr
		ipv6     bool
		warnings int
	}{
		{"ipv4 only", nil, addrs("10.0.0.5"), false, 0},
		{"ipv6 only", nil, addrs("fd00::5"), true, 0},
		{"dual-stack without the flag", nil, addrs("fd00::5", "10.0.0.5"), false, 0},
		{"dual-stack with ISTIO_DUAL_STACK", dualStackEnv("true"), addrs("10.0.0.5", "fd00::5"), true, 0},
		{"ISTIO_DUAL_STACK false", dualStackEnv("false"), addrs("10.0.0.5", "fd00::5"), false, 0},
		{"ISTIO_DUAL_STACK not a boolean", dualStackEnv("yes"), addrs("10.0.0.5", "fd00::5"), false, 1},
		{"ISTIO_DUAL_STACK on an ipv4 pod", dualStackEnv("true"), addrs("10.0.0.5"), false, 0},
		{"link-local ipv6 is not an address", nil, addrs("10.0.0.5", "fe80::1"), false, 0},
		{"ipv4-mapped counts as ipv4", nil, addrs("::ffff:10.0.0.5"), false, 0},
		{"no address known", nil, nil, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := decideSidecar(injected(tc.edit), nil, redirect.DefaultSpec(), tc.ips)
			if err != nil || !d.Capture {
				t.Fatalf("decision %+v, %v", d, err)
			}
			if !d.Spec.IPv4 || d.Spec.IPv6 != tc.ipv6 {
				t.Errorf("IPv4 %v IPv6 %v, want true %v (inputs %q)", d.Spec.IPv4, d.Spec.IPv6, tc.ipv6, d.Inputs)
			}
			if len(d.Warnings) != tc.warnings {
				t.Errorf("warnings %q, want %d", d.Warnings, tc.warnings)
			}
		})
	}
}

func TestRulesUseStatusIPs(t *testing.T) {
	pod := injected(func(p *corev1.Pod) {
		p.Status.PodIPs = []corev1.PodIP{{IP: "fd00::7"}}
	})
	d, err := Rules{Sidecar: redirect.DefaultSpec()}.Decide(pod, nil, nil)
	if err != nil || !d.Spec.IPv6 {
		t.Fatalf("IPv6-only pod by status: IPv6 %v, %v", d.Spec.IPv6, err)
	}
	d, err = Rules{Sidecar: redirect.DefaultSpec()}.Decide(pod, nil, []netip.Addr{netip.MustParseAddr("10.1.1.1")})
	if err != nil || d.Spec.IPv6 {
		t.Fatalf("the runtime's IPs win over the status: IPv6 %v, %v", d.Spec.IPv6, err)
	}
}
