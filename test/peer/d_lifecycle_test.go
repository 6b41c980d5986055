package peer

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
)

// istioMesh is istio-cni as test/harness/lifecycletest's scenarios drive it:
// sidecar and plain pods (ambient needs istiod and ztunnel, which
// test/mesh runs with sluice; here istio-cni runs in sidecar mode, where
// its plugin programs each injected pod's netns itself and istio-validation
// refuses a pod it finds unprogrammed); upgraded with `helm upgrade` of
// Istio's chart to the same build under a second tag (istioCNIImageB) and
// rolled back with `helm rollback`.
func istioMesh() *lifecycletest.Mesh {
	return &lifecycletest.Mesh{
		CNI:     lifecycletest.CNIIstioCNI,
		Cluster: cluster,
		Kinds:   []string{lifecycletest.KindSidecar, lifecycletest.KindPlain},
		Pod: func(kind, name string) *corev1.Pod {
			if kind == lifecycletest.KindSidecar {
				return sidecarPod(name, lifecycletest.Unreachable)
			}
			return plainPod(name, lifecycletest.Unreachable)
		},
		Upgrade: func(t *testing.T) {
			helm(t, "upgrade", release, istioChart(t), "-n", releaseNS, "--reuse-values", "--set", "image="+istioCNIImageB)
			rolledOut(t, istioCNIImageB)
		},
		Rollback: func(t *testing.T) {
			helm(t, "rollback", release, "-n", releaseNS)
			rolledOut(t, istioCNIImage)
		},
		Outage: func(t *testing.T, node string) func(*testing.T) {
			return lifecycletest.DaemonSetOutage(t, cluster, releaseNS, agentDS, "install-cni", "localhost/istio-absent:outage", node)
		},
		Agent: func(t testing.TB, node string) (string, error) {
			return lifecycletest.AgentOn(client(t), releaseNS, agentLabel, node)
		},
		FailedTolerated: "istio-cni's old agent takes its entry out of the conflist on SIGTERM in sidecar mode " +
			"(TestIstioCNIAgentOutage), so a sidecar pod whose sandbox is made before the new agent puts it back " +
			"gets no rules: istio-validation refuses it and the repair controller deletes it; never uncaptured, " +
			"but gone for good for a pod no owner recreates",
	}
}

// rolledOut waits until every node runs a Ready istio-cni of image.
func rolledOut(t testing.TB, image string) {
	t.Helper()
	lifecycletest.WaitRolledOut(t, cluster, releaseNS, agentDS, image, 10*time.Minute)
}

// The rolling upgrade test/lifecycle gives sluice, on istio-cni: while
// sidecar and plain pods start and stop on both nodes at over one a second
// each, `helm upgrade` of Istio's chart to another image and `helm
// rollback`. No sidecar pod's app may make its first connection
// uncaptured, no plain pod's be captured and no pod be evicted; pods that
// fail for good are counted (see istioMesh), with the extra start delay,
// in lifecycletest.ResultsEnv beside sluice's.
func TestIstioCNIRollingUpgradeUnderChurn(t *testing.T) {
	requireAgent(t)
	rolledOut(t, istioCNIImage)
	lifecycletest.RollingUpgrade(t, istioMesh())
}

// The reboot test/lifecycle gives sluice, on istio-cni: the first node
// reboots with sidecar pods running while a prober dials them; the app
// must never answer it itself, and each pod's restarted app must make its
// first connection captured.
func TestIstioCNIReboot(t *testing.T) {
	requireAgent(t)
	rolledOut(t, istioCNIImage)
	lifecycletest.Reboot(t, istioMesh())
}

// The outage under churn test/lifecycle gives sluice, on istio-cni: the
// first node's install-cni is gone for lifecycletest.OutageHold while
// sidecar and plain pods start and stop on both nodes. No pod may run
// uncaptured or be evicted; the sidecar pods istio-validation refuses
// meanwhile (the old agent took the plugin out of the conflist) and the
// repair controller deletes are counted as failed (see istioMesh).
func TestIstioCNIAgentOutageUnderChurn(t *testing.T) {
	requireAgent(t)
	rolledOut(t, istioCNIImage)
	lifecycletest.Outage(t, istioMesh())
}
