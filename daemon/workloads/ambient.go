package workloads

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

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
	}
	// Host is the netns holding the `inet sluice-host` table.
	Host netns.NsHandle
}

func isAmbient(r *Record) bool { return r.Spec.Mode == redirect.ModeAmbient }

// handOver finishes an ambient enrolment after its in-pod rules are in:
// probe IPs first (harmless without ztunnel), then ztunnel, whose ack is
// what makes the ADD succeed. The record is already listed, so a ztunnel
// connecting meanwhile gets the pod in its snapshot.
func (s *Store) handOver(ctx context.Context, r *Record) error {
	if s.Ambient == nil {
		return errors.New("ambient pod, but the agent runs without --ambient")
	}
	if err := redirect.AddHostIPs(s.Ambient.Host, podAddrs(r)...); err != nil {
		return fmt.Errorf("add %s to the host probe table: %w", r.Attachment, err)
	}
	if err := s.Ambient.Ztunnel.Add(ctx, ztunnelWorkload(r)); err != nil {
		return fmt.Errorf("hand %s to ztunnel: %w", r.Attachment, err)
	}
	return nil
}

// takeBack undoes handOver; errors are joined, every step is tried.
func (s *Store) takeBack(ctx context.Context, r *Record) error {
	if s.Ambient == nil {
		return nil
	}
	return errors.Join(
		s.Ambient.Ztunnel.Del(ctx, r.PodUID),
		redirect.RemoveHostIPs(s.Ambient.Host, podAddrs(r)...),
	)
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
		out = append(out, ztunnelWorkload(&r))
	}
	return out
}

func ztunnelWorkload(r *Record) ztunnel.Workload {
	return ztunnel.Workload{UID: r.PodUID, Name: r.PodName, Namespace: r.PodNamespace,
		ServiceAccount: r.ServiceAccount, Netns: r.Netns}
}

// podAddrs are the record's IPs without their prefix lengths.
func podAddrs(r *Record) []netip.Addr {
	var out []netip.Addr
	for _, ip := range r.IPs {
		if p, err := netip.ParsePrefix(ip); err == nil {
			out = append(out, p.Addr())
		} else if a, err := netip.ParseAddr(ip); err == nil {
			out = append(out, a)
		}
	}
	return out
}
