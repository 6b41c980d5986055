// Package late is the enrolment the agent makes itself, for a pod already
// running, that no CNI ADD made: its record and container id, when a pod is
// settled enough to have one, and its release once the pod is deleted.
// Three callers make one (repair's apply mode, live ambient enrolment,
// istio-cni adoption); "late" names only this kind of record (the journal's
// `late` field, the `late-` container id), never the reason it was made.
package late

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// prefix starts the container id of a late enrolment. The runtime's
// sandbox id is unknown to the agent, so the record gets its own, valid
// under the CNI rules (alphanumerics, '-'), that no runtime id collides
// with: those are hex. Journals hold it: it never changes.
const prefix = "late-"

// ContainerID is the container id a late enrolment is journaled under.
func ContainerID(podUID string) string { return prefix + podUID }

// Settled reports whether the pod is past its CNI ADD and alive: its
// sandbox has an IP (the kubelet writes it only after the runtime's network
// setup returned), it is not terminating, and it is not a host-network pod,
// which has no netns of its own to capture.
func Settled(pod *corev1.Pod) bool {
	switch {
	case pod.Spec.HostNetwork:
		return false
	case pod.DeletionTimestamp != nil:
		return false
	case pod.Status.Phase != corev1.PodRunning && pod.Status.Phase != corev1.PodPending:
		return false
	}
	return len(PodIPs(pod)) > 0
}

// PodIPs are the pod's addresses from its status; unparsable ones are
// skipped.
func PodIPs(pod *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, ip := range pod.Status.PodIPs {
		add(ip.IP)
	}
	add(pod.Status.PodIP)
	return out
}

// hostPrefixes writes IPs the way the journal holds them (CIDR, as CNI
// results give them); a pod's status has no prefix length, so each is a
// host route.
func hostPrefixes(ips []netip.Addr) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ips))
	for _, a := range ips {
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}

// FindNetns finds a running pod's netns under hostProc (the host's /proc
// as the agent sees it), by its cgroup or its IPs.
func FindNetns(hostProc string, pod *corev1.Pod) (string, error) {
	return podns.FindPodNetns(hostProc, string(pod.UID), PodIPs(pod))
}

// Record is the late record of the pod whose netns is at the path netns.
func Record(pod *corev1.Pod, d policy.Decision, netns string) workloads.Record {
	return workloads.Record{
		Attachment:     workloads.Attachment{ContainerID: ContainerID(string(pod.UID)), IfName: "eth0"},
		PodNamespace:   pod.Namespace,
		PodName:        pod.Name,
		PodUID:         string(pod.UID),
		ServiceAccount: d.ServiceAccount, // ztunnel's identity for an ambient pod
		Netns:          netns,
		IPs:            hostPrefixes(PodIPs(pod)),
		Spec:           d.Spec,
		Late:           true,
	}
}

// Enroll finds a running pod's netns under hostProc and enrols it in store
// as an ADD would have, under its late id.
func Enroll(ctx context.Context, store *workloads.Store, hostProc string, pod *corev1.Pod, d policy.Decision, log *slog.Logger) error {
	netns, err := FindNetns(hostProc, pod)
	if err != nil {
		return err
	}
	rec := Record(pod, d, netns)
	if err := store.Enroll(ctx, rec); err != nil {
		return fmt.Errorf("enroll pod %s/%s late: %w", pod.Namespace, pod.Name, err)
	}
	log.Info("programmed capture for a running pod", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID,
		"netns", netns, "attachment", rec.Attachment.String(), "mode", d.Spec.Mode)
	return nil
}

// Records are the pod's enrolled attachments, late or not.
func Records(store *workloads.Store, uid types.UID) []workloads.Record {
	var out []workloads.Record
	for _, rec := range store.List() {
		if rec.PodUID == string(uid) {
			out = append(out, rec)
		}
	}
	return out
}

// Release drops the late enrolments of a deleted pod: the runtime's DEL
// names its sandbox, never the late id.
func Release(ctx context.Context, store *workloads.Store, uid types.UID, log *slog.Logger) {
	for _, rec := range Records(store, uid) {
		if !rec.Late {
			continue
		}
		if err := store.Release(ctx, rec.Attachment, ""); err != nil {
			log.Warn("release a deleted pod's late enrolment", "attachment", rec.Attachment.String(), "err", err)
		}
	}
}
