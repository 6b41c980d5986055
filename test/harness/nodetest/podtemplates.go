package nodetest

import (
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pods every suite on the test cluster starts, which each wrote its
// own copy of.

// Unreachable is a destination nothing on the node routes (TEST-NET-1):
// a connection to it that gets an answer was captured in the pod.
const Unreachable = "192.0.2.10:80"

// The Istio metadata istiod's injector writes in CNI mode: what sluice's
// and istio-cni's plugins look for (an istio-proxy container and the
// status annotation, no istio-init).
const (
	AnnSidecarStatus = "sidecar.istio.io/status"
	SidecarStatus    = `{"initContainers":["istio-validation"],"containers":["istio-proxy"],"volumes":["istio-envoy"],"imagePullSecrets":null,"revision":"default"}`
	ProxyUID         = int64(1337)
)

// AppContainer is the test app as a pod's "app": it serves "app" on 8080
// and keeps dialling dial from its first instant, logging each result.
func (im Images) AppContainer(dial string) corev1.Container {
	return corev1.Container{
		Name: "app", Image: im.TestApp, ImagePullPolicy: corev1.PullNever,
		Command: []string{"/testapp", "app", "8080", dial},
	}
}

// PlainPod is an uninjected application pod of the app container alone,
// deleted at once when asked.
func (im Images) PlainPod(name, dial string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{im.AppContainer(dial)},
			TerminationGracePeriodSeconds: &zero,
		},
	}
}

// SidecarPod is what the injector makes of PlainPod in CNI mode: the
// status annotation, an istio-validation init container (the test app's
// check that a connection is redirected) and an istio-proxy running as
// 1337 (the test app's stand-in proxy on 15001 and 15006).
func (im Images) SidecarPod(name, dial string) *corev1.Pod {
	p := im.PlainPod(name, dial)
	p.Annotations = map[string]string{AnnSidecarStatus: SidecarStatus}
	uid := ProxyUID
	sc := &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &uid}
	p.Spec.InitContainers = []corev1.Container{{
		Name: "istio-validation", Image: im.TestApp, ImagePullPolicy: corev1.PullNever,
		Command: []string{"/testapp", "validate"}, SecurityContext: sc,
	}}
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
		Name: "istio-proxy", Image: im.TestApp, ImagePullPolicy: corev1.PullNever,
		Command: []string{"/testapp", "proxy", "15001", "15006"}, SecurityContext: sc,
	})
	return p
}

// ZtunnelStandIn is the test app's ztunnel part deployed as Istio deploys
// ztunnel: a DaemonSet in ns whose pods (labelled app=ztunnel and labels)
// share the node's /var/run/ztunnel with the agent and hold the
// capabilities to enter pod network namespaces.
func (im Images) ZtunnelStandIn(ns string, labels map[string]string) *appsv1.DaemonSet {
	selector := map[string]string{"app": "ztunnel"}
	podLabels := maps.Clone(selector)
	maps.Copy(podLabels, labels)
	root := int64(0)
	hostPathType := corev1.HostPathDirectoryOrCreate
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "ztunnel", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "istio-proxy", Image: im.TestApp, ImagePullPolicy: corev1.PullNever,
						Command: []string{"/testapp", "ztunnel", "/var/run/ztunnel/ztunnel.sock"},
						SecurityContext: &corev1.SecurityContext{
							RunAsUser:    &root,
							Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "SYS_ADMIN", "NET_RAW"}},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "cni-ztunnel-sock-dir", MountPath: "/var/run/ztunnel"}},
					}},
					Volumes: []corev1.Volume{{Name: "cni-ztunnel-sock-dir", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: "/var/run/ztunnel", Type: &hostPathType},
					}}},
				},
			},
		},
	}
}
