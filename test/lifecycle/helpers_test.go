package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// The release the tests install, in the namespace Istio's CNI agent uses.
const (
	release   = "sluice"
	releaseNS = "kube-system"
	agentApp  = "sluice-agent" // the DaemonSet pods' app label
	agentDS   = release + "-agent"
)

func client(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	return cluster.ClientT(t)
}

// helm runs the cached helm against the cluster (nodetest's Helm).
func helm(t testing.TB, args ...string) {
	t.Helper()
	cluster.HelmT(t, args...)
}

// chartArgs are `helm install|upgrade` arguments for the image built with
// tag, never pulled, ambient on. Repair is off: its late enrolment of pods
// found running uncaptured races the app's start and would hide a pod
// whose ADD let it start before its rules were in; these tests hold the
// ADD path alone to the rule.
func chartArgs(verb, tag string) []string {
	return []string{verb, release, "deploy/helm/sluice", "-n", releaseNS,
		"--set", "image.repository=" + images.SluiceRepo,
		"--set", "image.tag=" + tag,
		"--set", "image.pullPolicy=Never",
		"--set", "ambient.enabled=true",
		"--set", "repair.enabled=false",
	}
}

var installed bool

// requireMesh installs the chart at tagA and the ztunnel stand-in once,
// and waits for both.
func requireMesh(t *testing.T) {
	t.Helper()
	if !installed {
		helm(t, chartArgs("install", tagA)...)
		if _, err := client(t).AppsV1().DaemonSets(releaseNS).Create(t.Context(), images.ZtunnelStandIn(releaseNS, nil), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ztunnel DaemonSet: %v", err)
		}
		installed = true
	}
	rolledOut(t, tagA)
	nodetest.Eventually(t, time.Minute, "ztunnel stand-in connected on every node", func() error {
		l, err := client(t).CoreV1().Pods(releaseNS).List(t.Context(), metav1.ListOptions{LabelSelector: "app=ztunnel"})
		if err != nil || len(l.Items) != len(cluster.Nodes()) {
			return fmt.Errorf("ztunnel pods: %d, %v", len(l.Items), err)
		}
		for _, p := range l.Items {
			if !strings.Contains(logs(t, releaseNS, p.Name, "istio-proxy"), "ztunnel connected") {
				return fmt.Errorf("%s: %s", p.Name, nodetest.PodState(&p))
			}
		}
		return nil
	})
}

// rolledOut waits until every node runs a Ready agent of the image with
// tag.
func rolledOut(t testing.TB, tag string) {
	t.Helper()
	lifecycletest.WaitRolledOut(t, cluster, releaseNS, agentDS, images.SluiceRepo+":"+tag, 10*time.Minute)
}

// sluiceMesh is sluice as the lifecycle scenarios drive it: sidecar,
// ambient and plain pods; upgraded from tagA to tagB with `helm upgrade`,
// rolled back with `helm rollback`.
func sluiceMesh() *lifecycletest.Mesh {
	return &lifecycletest.Mesh{
		CNI:     lifecycletest.CNISluice,
		Cluster: cluster,
		Kinds:   []string{lifecycletest.KindSidecar, lifecycletest.KindAmbient, lifecycletest.KindPlain},
		Pod:     podOfKind,
		Upgrade: func(t *testing.T) {
			helm(t, chartArgs("upgrade", tagB)...)
			rolledOut(t, tagB)
		},
		Rollback: func(t *testing.T) {
			helm(t, "rollback", release, "-n", releaseNS)
			rolledOut(t, tagA)
		},
		Outage: func(t *testing.T, node string) func(*testing.T) {
			return lifecycletest.DaemonSetOutage(t, cluster, releaseNS, agentDS, "sluice-agent", "sluice-absent:outage", node)
		},
		Agent: func(t testing.TB, node string) (string, error) {
			return lifecycletest.AgentOn(client(t), releaseNS, "app="+agentApp, node)
		},
	}
}

// logs is a container's log (nodetest's Logs).
func logs(t testing.TB, ns, pod, container string) string {
	return cluster.Logs(ns, pod, container)
}
