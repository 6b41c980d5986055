package nri

import (
	"context"

	"github.com/containerd/nri/pkg/api"
)

// Synchronize reconciles with the runtime's list of every pod, sent once on
// each connection before any live event: records of sandboxes the runtime
// no longer has are released (the runtime sends no Stop or Remove for pods
// it lost across its own restart), and pods that are not enrolled are
// enrolled (the agent was away when they started). It never fails: an
// error here would cost the connection, and every pod with it.
func (p *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	live := make(map[string]bool, len(pods))
	for _, pod := range pods {
		live[pod.GetId()] = true
	}
	ctx, cancel := p.eventContext(ctx)
	defer cancel()
	released := p.releaseGone(ctx, live)
	p.forgetGone(live)
	var missing []*api.PodSandbox
	for _, pod := range pods {
		if !p.captured(pod) {
			missing = append(missing, pod)
		}
	}
	enrolled, left := p.enrolAll(ctx, missing)
	if len(left) > 0 {
		// Past the budget the runtime would drop the connection; the rest
		// are enrolled after the reply, one budget each.
		go p.enrolLater(context.WithoutCancel(ctx), left)
	}
	p.log.Info("synchronized with the runtime", "pods", len(pods), "released", released,
		"enrolled", enrolled, "deferred", len(left))
	return nil, nil
}

// releaseGone releases every record whose sandbox the runtime does not
// list. Late enrolments belong to the repairer, keyed by pod, not sandbox.
func (p *Plugin) releaseGone(ctx context.Context, live map[string]bool) int {
	n := 0
	for _, r := range p.store.List() {
		if r.Late || live[r.ContainerID] {
			continue
		}
		if err := p.releaseAttachment(ctx, r.Attachment, "", nil); err != nil {
			p.log.Warn("release of a sandbox the runtime no longer has failed", "attachment", r.Attachment.String(), "err", err)
			continue
		}
		p.log.Info("released a sandbox the runtime no longer has", "attachment", r.Attachment.String(),
			"pod", r.PodNamespace+"/"+r.PodName)
		n++
	}
	return n
}

// forgetGone drops pass-through decisions of sandboxes the runtime no
// longer lists (their Stop and Remove may never come).
func (p *Plugin) forgetGone(live map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.passed {
		if !live[id] {
			delete(p.passed, id)
		}
	}
}

// enrolAll enrols pods one by one until ctx ends and returns how many it
// got through and the ones it did not reach.
func (p *Plugin) enrolAll(ctx context.Context, pods []*api.PodSandbox) (int, []*api.PodSandbox) {
	n := 0
	for i, pod := range pods {
		if ctx.Err() != nil {
			return n, pods[i:]
		}
		if err := p.enrol(ctx, pod, "Synchronize"); err == nil {
			n++
		}
	}
	return n, nil
}

func (p *Plugin) enrolLater(ctx context.Context, pods []*api.PodSandbox) {
	for _, pod := range pods {
		ectx, cancel := p.eventContext(ctx)
		_ = p.enrol(ectx, pod, "Synchronize") // enrol logs its own failure
		cancel()
	}
}
