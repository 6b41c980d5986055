package nri

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// apiVersion is what the plugin's in-process calls speak: the agent's own.
const apiVersion = sluicev1.ApiVersion_API_VERSION_2

// enrol runs the pod through the CNI ADD path. A pod already enrolled in
// the same netns (by the CNI trigger in "both" mode, or a retried event) is
// left as it is: the two triggers decide alike, so there is nothing to
// redo.
func (p *Plugin) enrol(ctx context.Context, pod *api.PodSandbox, event string) error {
	netns := netnsOf(pod)
	log := p.log.With("event", event, "pod", pod.GetNamespace()+"/"+pod.GetName(), "sandbox", short(pod.GetId()))
	if netns == "" {
		log.Debug("passed through: host-network pod (no network namespace)")
		return nil
	}
	if r, ok := p.store.Get(attachment(pod)); ok && r.Netns == netns {
		log.Debug("already enrolled", "mode", r.Spec.Mode)
		return nil
	}
	start := time.Now()
	resp, err := p.cni.Add(ctx, addRequest(pod, netns, event))
	if err != nil {
		log.Error("capture failed; the runtime fails the pod", "netns", netns, "err", err)
		return fmt.Errorf("sluice: capture pod %s/%s (sandbox %s): %w", pod.GetNamespace(), pod.GetName(), short(pod.GetId()), err)
	}
	if !resp.Enrolled {
		p.mu.Lock()
		p.passed[pod.GetId()] = resp.Reason
		p.mu.Unlock()
		log.Info("passed through", "reason", resp.Reason)
		return nil
	}
	log.Info("enrolled", "mode", resp.Mode, "netns", netns, "took", time.Since(start))
	return nil
}

// release runs the pod through the CNI DEL path. Never fails teardown: a
// DEL that fails leaves the record to the reconciler and Synchronize.
func (p *Plugin) release(ctx context.Context, pod *api.PodSandbox, event string) {
	p.mu.Lock()
	delete(p.passed, pod.GetId())
	p.mu.Unlock()
	if _, ok := p.store.Get(attachment(pod)); !ok {
		return
	}
	ctx, cancel := p.eventContext(ctx)
	defer cancel()
	if err := p.releaseAttachment(ctx, attachment(pod), netnsOf(pod), podRef(pod)); err != nil {
		p.log.Warn("release failed; the reconciler retries", "event", event, "sandbox", short(pod.GetId()), "err", err)
		return
	}
	p.log.Info("released", "event", event, "pod", pod.GetNamespace()+"/"+pod.GetName(), "sandbox", short(pod.GetId()))
}

func (p *Plugin) releaseAttachment(ctx context.Context, a workloads.Attachment, netns string, pod *sluicev1.PodRef) error {
	_, err := p.cni.Del(ctx, &sluicev1.DelRequest{ApiVersion: apiVersion, ContainerId: a.ContainerID,
		IfName: a.IfName, Netns: netns, Pod: pod})
	return err
}

func addRequest(pod *api.PodSandbox, netns, event string) *sluicev1.AddRequest {
	req := &sluicev1.AddRequest{
		ApiVersion:  apiVersion,
		ContainerId: pod.GetId(),
		Netns:       netns,
		IfName:      IfName,
		Pod:         podRef(pod),
		// No network name: NRI does not say which CNI network made the
		// pod, and a record without one is outside every CNI GC's scope.
		// Synchronize is the GC of these records.
		Config:    &sluicev1.PluginConfig{},
		RequestId: "nri-" + event + "-" + short(pod.GetId()),
	}
	for _, ip := range pod.GetIps() {
		req.Ips = append(req.Ips, &sluicev1.IPConfig{Address: ip, Interface: IfName})
	}
	return req
}

func podRef(pod *api.PodSandbox) *sluicev1.PodRef {
	return &sluicev1.PodRef{Namespace: pod.GetNamespace(), Name: pod.GetName(), Uid: pod.GetUid()}
}

func attachment(pod *api.PodSandbox) workloads.Attachment {
	return workloads.Attachment{ContainerID: pod.GetId(), IfName: IfName}
}

// netnsOf is the pod's network namespace path; "" for a host-network pod,
// which the runtime reports with no network namespace.
func netnsOf(pod *api.PodSandbox) string {
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			return ns.GetPath()
		}
	}
	return ""
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
