package workloads

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
)

// Ambient connects enrolment of ambient pods to the node: ztunnel gets each
// pod's netns over ZDS, and the host probe table learns its IPs so kubelet
// probes reach the pod from the probe SNAT address, uncaptured.
type Ambient struct {
	Ztunnel interface {
		Add(ctx context.Context, w ztunnel.Workload) error
		Del(ctx context.Context, uid string) error
		// AwaitConnection (ztunnel.Server's) waits for a connected
		// ztunnel: an ambient ADD that finds none waits for one before
		// it takes any lock (the attachment's or the pod's), which a DEL
		// of any container or pod of that stripe needs.
		AwaitConnection(ctx context.Context, w ztunnel.Workload) error
	}
	// Host is the netns holding the `inet sluice-host` table.
	Host netns.NsHandle
	// RestoreHost writes the host table again as the agent configured it,
	// empty, when a pass finds it gone; nil leaves it gone.
	RestoreHost func() error
}

// ErrZtunnel is wrapped when an ambient enrolment failed because ztunnel
// did not take the pod (absent, refused, or no ack in time): Istio marks
// such a pod "pending".
var ErrZtunnel = errors.New("ztunnel did not take the pod")

func isAmbient(r *Record) bool { return r.Spec.Mode == redirect.ModeAmbient }

// handOver finishes an ambient enrolment after its in-pod rules are in:
// probe IPs first (harmless without ztunnel), then ztunnel, whose ack is
// what makes the ADD succeed. The record is already listed, so a ztunnel
// connecting meanwhile gets the pod in its snapshot, and a release of
// another attachment of the pod sees it and keeps ztunnel's hold.
func (s *Store) handOver(ctx context.Context, r *Record) error {
	if s.ambient == nil {
		return errors.New("ambient pod, but the agent runs without --ambient")
	}
	// The ack keeps rollbackReserve of the deadline back.
	ackCtx, cancel := ackContext(ctx)
	defer cancel()
	defer lockStripe(&s.podStripes, r.PodUID)()
	s.hostMu.Lock()
	err := s.kernel.AddHostIPs(redirect.Netns(s.ambient.Host), podAddrs(r)...)
	s.hostMu.Unlock()
	if err != nil {
		return fmt.Errorf("add %s to the host probe table: %w", r.Attachment, err)
	}
	if err := s.ambient.Ztunnel.Add(ackCtx, ztunnelWorkload(r)); err != nil {
		return fmt.Errorf("hand %s to ztunnel: %w: %w", r.Attachment, ErrZtunnel, err)
	}
	return nil
}

// enrollAmbient is Enroll of an ambient pod. With wait, it waits for a
// ztunnel before any lock: the wait may take seconds, and a DEL or an ADD
// of any container on r's stripe needs the attachment lock. It then tries
// a second time when the first hand-over met a ztunnel connection that had
// died unnoticed (no ztunnel connected after all): that try was rolled
// back, and a restarted ztunnel is on its way.
func (s *Store) enrollAmbient(ctx context.Context, r Record, wait bool) error {
	if !wait {
		return s.enroll(ctx, r)
	}
	var err error
	for try := 0; try < 2; try++ {
		if err = s.awaitZtunnel(ctx, &r); err != nil {
			return err
		}
		if err = s.enroll(ctx, r); !errors.Is(err, ztunnel.ErrNotConnected) {
			return err
		}
	}
	return err
}

// awaitZtunnel waits for a ztunnel to be
// connected before r's enrolment takes any lock; nothing has changed yet,
// so a wait that gives up leaves the netns as it was. The wait keeps
// rollbackReserve of the deadline back, as the ack does.
func (s *Store) awaitZtunnel(ctx context.Context, r *Record) error {
	if s.ambient == nil {
		return errors.New("ambient pod, but the agent runs without --ambient")
	}
	waitCtx, cancel := ackContext(ctx)
	defer cancel()
	if err := s.ambient.Ztunnel.AwaitConnection(waitCtx, ztunnelWorkload(r)); err != nil {
		return fmt.Errorf("hand %s to ztunnel: %w: %w", r.Attachment, ErrZtunnel, err)
	}
	return nil
}

// rollbackReserve is the part of an ADD's deadline kept back from
// ztunnel's ack, so a late ztunnel is answered as "ztunnel did not ack"
// with everything rolled back, not as the caller's own deadline.
const rollbackReserve = 250 * time.Millisecond

func ackContext(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) <= 2*rollbackReserve {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, dl.Add(-rollbackReserve))
}

// takeBack undoes handOver for r, which is no longer listed; errors are
// joined, every step is tried. A probe address another listed record holds
// (a new pod that reuses the IP, a sibling attachment) stays; ztunnel hears
// Del only when no attachment of the pod is left (a recreated sandbox keeps
// its proxy).
func (s *Store) takeBack(ctx context.Context, r *Record) error {
	if s.ambient == nil {
		return nil
	}
	defer lockStripe(&s.podStripes, r.PodUID)()
	err := s.removeHostIPsLocked(r)
	s.mu.RLock()
	podLeft := r.PodUID != "" && slices.ContainsFunc(s.listedLocked(), func(o *Record) bool { return isAmbient(o) && o.PodUID == r.PodUID })
	s.mu.RUnlock()
	if podLeft {
		return err
	}
	return errors.Join(err, s.ambient.Ztunnel.Del(ctx, r.PodUID))
}

// dropHostIPs removes from the host probe table the addresses of r, which
// is no longer listed, that no listed record holds; ztunnel is not told.
func (s *Store) dropHostIPs(_ context.Context, r *Record) error {
	if s.ambient == nil || !isAmbient(r) {
		return nil
	}
	defer lockStripe(&s.podStripes, r.PodUID)()
	return s.removeHostIPsLocked(r)
}

// removeHostIPsLocked is dropHostIPs for a caller holding r's pod stripe.
func (s *Store) removeHostIPsLocked(r *Record) error {
	s.hostMu.Lock()
	defer s.hostMu.Unlock()
	s.mu.RLock()
	var gone []netip.Addr
	listed := s.listedLocked()
	for _, a := range podAddrs(r) {
		if !slices.ContainsFunc(listed, func(o *Record) bool { return isAmbient(o) && slices.Contains(podAddrs(o), a) }) {
			gone = append(gone, a)
		}
	}
	s.mu.RUnlock()
	return s.kernel.RemoveHostIPs(redirect.Netns(s.ambient.Host), gone...)
}

// ZtunnelSnapshot lists the ambient pods for a ztunnel that (re)connects:
// one entry per pod, whatever its attachments.
func (s *Store) ZtunnelSnapshot() []ztunnel.Workload {
	seen := map[string]bool{}
	var out []ztunnel.Workload
	for _, r := range s.List() {
		if !isAmbient(&r) || seen[r.PodUID] {
			continue
		}
		seen[r.PodUID] = true
		w := ztunnelWorkload(&r)
		w.Netns = s.ztunnelNetns(&r)
		out = append(out, w)
	}
	return out
}

func ztunnelWorkload(r *Record) ztunnel.Workload {
	return ztunnel.Workload{UID: r.PodUID, Name: r.PodName, Namespace: r.PodNamespace,
		ServiceAccount: r.ServiceAccount, Netns: r.Netns}
}

// podAddrs are the record's IPs without their prefix lengths.
func podAddrs(r *Record) []netip.Addr {
	out := make([]netip.Addr, 0, len(r.IPs))
	for _, p := range r.IPs {
		out = append(out, p.Addr())
	}
	return out
}
