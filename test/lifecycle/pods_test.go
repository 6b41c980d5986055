package lifecycle

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
)

// podOfKind is a pod of a lifecycletest kind: nodetest's sidecar pod (the
// test app's istio-validation), or its plain pod, which an ambient
// namespace makes ambient.
func podOfKind(kind, name string) *corev1.Pod {
	if kind == lifecycletest.KindSidecar {
		return images.SidecarPod(name, lifecycletest.Unreachable)
	}
	return images.PlainPod(name, lifecycletest.Unreachable)
}
