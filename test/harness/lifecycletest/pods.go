package lifecycletest

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// Unreachable is a destination nothing on the node routes (TEST-NET-1).
// A Mesh's pods' apps dial it as their first act: uncaptured, the dial
// fails with no route; captured, the pod's redirect answers it (the
// proxy's or ztunnel's reply, or a reset from the redirect port while
// nothing listens there yet).
const Unreachable = nodetest.Unreachable

// FirstDial is the app's first "app dial" log line's result, "" if none
// yet.
func FirstDial(log string) string {
	for _, line := range strings.Split(log, "\n") {
		if rest, ok := strings.CutPrefix(line, "app dial "+Unreachable+": "); ok {
			return rest
		}
	}
	return ""
}

// DialCaptured says whether a dial result came through the pod's
// redirect: answered on 15001 by the proxy (sidecar) or ztunnel
// (ambient), or refused by the redirect port before its listener is up.
// An uncaptured dial has no route off the node and fails otherwise.
func DialCaptured(result string) bool {
	return strings.Contains(result, "captured on :15001") || strings.Contains(result, "connection refused")
}

// AllRunning says whether every container of the pod runs.
func AllRunning(p *corev1.Pod) bool {
	if p.Status.PodIP == "" || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// Evicted says whether the pod was evicted: by the kubelet (reason
// Evicted) or by a controller that marks it a disruption target (the
// node lifecycle controller's taint eviction does).
func Evicted(p *corev1.Pod) bool {
	if p.Status.Reason == "Evicted" {
		return true
	}
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue
	})
}

// AppID is the app container's ID.
func AppID(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "app" {
			return cs.ContainerID
		}
	}
	return ""
}

// pinned is p bound to the node named node through the scheduler (a
// hostname node selector, as a node affinity would).
func pinned(p *corev1.Pod, node string) *corev1.Pod {
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{}
	}
	p.Spec.NodeSelector[corev1.LabelHostname] = node
	return p
}

// Percentile is the p-th percentile (0..100, nearest rank) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
