package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// Label flips on a running pod enrol and unenrol it live, with no restart:
// within 2 s its table, ztunnel's state and the redirection annotation
// follow — first through its namespace's label, then its own opt-out.
func TestAmbientLabelFlipOnRunningPod(t *testing.T) {
	env, c := sharedKube(t)
	createNamespace(t, c, "mesh")
	n := newNode(t)
	zsock := filepath.Join(t.TempDir(), "zt", "ztunnel.sock")
	n.kubeAgent(env, "--ambient", "--host-netns", n.NS.Path, "--ztunnel-socket", zsock,
		"--netns-roots", n.Root+",/proc", "--host-proc", "/proc")
	z := connectZDS(t, zsock)
	if req, _ := z.next(); req.GetSnapshotSent() == nil {
		t.Fatalf("want an empty snapshot, got %v", req)
	}

	ip := nstest.TestIP(t)
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{NodeName: kubeNode, ServiceAccountName: "app-sa", Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	pod := runningPod(t, c, "mesh", plain, ip)
	sb := n.podSandbox(t, "app", pod, ip)
	if s := rulesetState(t, sb); s != "none" {
		t.Fatalf("a plain pod got rules: %s", s)
	}

	label := func(kind, name, value string) {
		t.Helper()
		patch := []byte(`{"metadata":{"labels":{"istio.io/dataplane-mode":` + value + `}}}`)
		var err error
		if kind == "namespace" {
			_, err = c.CoreV1().Namespaces().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
		} else {
			_, err = c.CoreV1().Pods("mesh").Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	annotated := func() string {
		p, err := c.CoreV1().Pods("mesh").Get(context.Background(), "app", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Annotations["ambient.istio.io/redirection"]
	}

	label("namespace", "mesh", `"ambient"`)
	req, ino := z.next()
	if req.GetAdd().GetUid() != string(pod.UID) || ino != netnsInode(t, sb) ||
		req.GetAdd().GetWorkloadInfo().GetServiceAccount() != "app-sa" {
		t.Fatalf("ztunnel got %v (netns %d), want Add of the pod with its netns and service account", req, ino)
	}
	nstest.Eventually(t, 2*time.Second, func() bool {
		return rulesetState(t, sb) != "none" && annotated() == "enabled"
	}, "pod not enrolled within 2s of its namespace's label")
	n.expectInSync(t, "late-"+string(pod.UID))

	label("pod", "app", `"none"`)
	if req, _ := z.next(); req.GetDel().GetUid() != string(pod.UID) {
		t.Fatalf("ztunnel got %v, want Del of the pod", req)
	}
	nstest.Eventually(t, 2*time.Second, func() bool {
		return rulesetState(t, sb) == "none" && annotated() == ""
	}, "pod not unenrolled within 2s of its opt-out label")
	if ws := n.Workloads(t); len(ws) != 0 {
		t.Fatalf("agent still lists %v", ws)
	}
}
