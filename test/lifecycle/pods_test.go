package lifecycle

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Istio metadata istiod's injector writes in CNI mode.
const (
	annStatus = "sidecar.istio.io/status"
	statusVal = `{"initContainers":["istio-validation"],"containers":["istio-proxy"],"volumes":["istio-envoy"],"imagePullSecrets":null,"revision":"default"}`
	proxyUID  = int64(1337)
)

// unreachable is a destination nothing on the node routes (TEST-NET-1).
// The test app dials it as its first act: uncaptured, the dial fails with
// no route; captured, the pod's redirect answers it (the proxy's reply, or
// a reset from the redirect port while no proxy listens yet).
const unreachable = "192.0.2.10:80"

// Pod kinds the tests mix.
const (
	kindSidecar = "sidecar"
	kindAmbient = "ambient" // a plain pod in an ambient namespace
	kindPlain   = "plain"
)

// plainPod serves "app" on 8080 and, from its first instant, keeps
// dialling unreachable, logging each result.
func plainPod(name string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/testapp", "app", "8080", unreachable},
			}},
			TerminationGracePeriodSeconds: &zero,
		},
	}
}

// sidecarPod is what the injector makes of plainPod in CNI mode: the
// status annotation, the istio-validation init container and an
// istio-proxy running as 1337 (the test app's stand-in proxy).
func sidecarPod(name string) *corev1.Pod {
	p := plainPod(name)
	p.Annotations = map[string]string{annStatus: statusVal}
	uid := proxyUID
	sc := &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &uid}
	p.Spec.InitContainers = []corev1.Container{{
		Name: "istio-validation", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
		Command: []string{"/testapp", "validate"}, SecurityContext: sc,
	}}
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
		Name: "istio-proxy", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
		Command: []string{"/testapp", "proxy", "15001", "15006"}, SecurityContext: sc,
	})
	return p
}

func podOfKind(kind, name string) *corev1.Pod {
	if kind == kindSidecar {
		return sidecarPod(name)
	}
	return plainPod(name)
}

// firstDial is the app's first "app dial" log line's result, "" if none
// yet.
func firstDial(log string) string {
	for _, line := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(line, "app dial "+unreachable+": "); ok {
			return rest
		}
	}
	return ""
}

// dialCaptured says whether a dial result came through the pod's
// redirect: answered by the proxy (sidecar) or ztunnel (ambient) on
// 15001, or reset by the redirect port before its listener is up. An
// uncaptured dial has no route off the node and fails otherwise.
func dialCaptured(result string) bool {
	return strings.Contains(result, "captured on :15001") || strings.Contains(result, "connection refused")
}
