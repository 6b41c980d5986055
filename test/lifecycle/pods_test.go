package lifecycle

import (
	"github.com/sluicemesh/sluice/internal/lifecycletest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Istio metadata istiod's injector writes in CNI mode.
const (
	annStatus = "sidecar.istio.io/status"
	statusVal = `{"initContainers":["istio-validation"],"containers":["istio-proxy"],"volumes":["istio-envoy"],"imagePullSecrets":null,"revision":"default"}`
	proxyUID  = int64(1337)
)

// plainPod serves "app" on 8080 and, from its first instant, keeps
// dialling lifecycletest.Unreachable, logging each result.
func plainPod(name string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/testapp", "app", "8080", lifecycletest.Unreachable},
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
	if kind == lifecycletest.KindSidecar {
		return sidecarPod(name)
	}
	return plainPod(name)
}
