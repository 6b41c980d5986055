package main

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// Is this SIGTERM an uninstall here? The DaemonSet's own answers, as the
// API server gives them (the real path is test/node's).
func TestLeavingDecision(t *testing.T) {
	const ns, podName, nodeName, dsName = "sluice", "sluice-agent-x7k2p", "node-a", "sluice-agent"
	ds := func(mutate func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dsName, UID: "ds-1"}}
		if mutate != nil {
			mutate(d)
		}
		return d
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podName,
		OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: dsName, UID: types.UID("ds-1")}}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"mesh": "sluice"}}}
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		want    bool
	}{
		{"rolling: entry stays", []runtime.Object{pod, node, ds(nil)}, false},
		{"selector still matches", []runtime.Object{pod, node, ds(func(d *appsv1.DaemonSet) {
			d.Spec.Template.Spec.NodeSelector = map[string]string{"mesh": "sluice"}
		})}, false},
		{"selector moved away", []runtime.Object{pod, node, ds(func(d *appsv1.DaemonSet) {
			d.Spec.Template.Spec.NodeSelector = map[string]string{"mesh": "istio"}
		})}, true},
		{"required affinity excludes the node", []runtime.Object{pod, node, ds(func(d *appsv1.DaemonSet) {
			d.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "mesh", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"sluice"}}},
				}}}}}
		})}, true},
		{"node unreadable: fail closed", []runtime.Object{pod, ds(func(d *appsv1.DaemonSet) {
			d.Spec.Template.Spec.NodeSelector = map[string]string{"mesh": "istio"}
		})}, false},
		{"DaemonSet gone", []runtime.Object{pod, node}, true},
		{"DaemonSet replaced", []runtime.Object{pod, node, ds(func(d *appsv1.DaemonSet) { d.UID = "ds-2" })}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.objects...)
			got, why := leaving(context.Background(), client, ns, podName, nodeName)
			if got != tc.want {
				t.Errorf("leaving = %v (%s), want %v", got, why, tc.want)
			}
		})
	}
}
