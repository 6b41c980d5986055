package policy

import (
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
			d, err := decideSidecar(tc.pod, tc.ns, redirect.DefaultSpec())
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
		{"dns capture not a boolean is ignored", injected(func(p *corev1.Pod) {
			proxyOf(p).Env = []corev1.EnvVar{{Name: envDNSCapture, Value: "yes please"}}
		}), nil},
		{"annotations", injected(func(p *corev1.Pod) { p.Annotations[annIncludeInboundPorts] = "8080" }),
			func(s *redirect.Spec) { s.IncludeInboundPorts = []uint16{8080} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := decideSidecar(tc.pod, nil, redirect.DefaultSpec())
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
	_, err := decideSidecar(pod, nil, redirect.DefaultSpec())
	if err == nil || !strings.Contains(err.Error(), annExcludeOutboundPorts) || !strings.Contains(err.Error(), `"http"`) {
		t.Errorf("got %v, want an error naming the annotation and the bad value", err)
	}
}
