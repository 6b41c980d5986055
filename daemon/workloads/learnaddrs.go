package workloads

import (
	"errors"
	"net/netip"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// LearnAddrs gives the pod's ambient attachments that were enrolled with no
// IPs (an ADD that carried none, whose netns held none yet) the addresses
// its status now lists: the host probe table learns them, so kubelet
// probes reach the pod from the probe SNAT address instead of failing, and
// the journal keeps them, so the pod's release takes them out again.
// Istio's node agent syncs its probe set from the pod's status the same
// way. An attachment that has IPs keeps them: the runtime's are the truth.
func (s *Store) LearnAddrs(podUID string, ips []netip.Addr) error {
	if s.ambient == nil || podUID == "" {
		return nil
	}
	var prefixes []netip.Prefix
	for _, ip := range ips {
		if ip = ip.Unmap(); ip.IsValid() {
			prefixes = append(prefixes, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
	if len(prefixes) == 0 {
		return nil
	}
	// A scan under the read lock, not a sorted List: it runs on every
	// ambient pod's status update.
	var todo []Attachment
	s.mu.RLock()
	for _, r := range s.recs {
		if isAmbient(r) && r.PodUID == podUID && len(r.IPs) == 0 {
			todo = append(todo, r.Attachment)
		}
	}
	s.mu.RUnlock()
	var errs []error
	for _, a := range todo {
		errs = append(errs, s.learnAddrs(a, prefixes))
	}
	return errors.Join(errs...)
}

// learnAddrs journals then programs one attachment's addresses, under the
// attachment's lock so a DEL or re-ADD is never interleaved: the journal
// first, so a failure in between is repaired by Reconcile, which adds
// every ambient record's IPs to the host table.
func (s *Store) learnAddrs(a Attachment, prefixes []netip.Prefix) error {
	defer s.lock(a)()
	s.mu.RLock()
	cur, ok := s.recs[a]
	s.mu.RUnlock()
	if !ok || len(cur.IPs) > 0 {
		return nil // released, or re-enrolled with IPs, meanwhile
	}
	r := *cur
	r.IPs = prefixes
	if err := s.writeRecord(&r); err != nil {
		return err
	}
	s.mu.Lock()
	s.recs[a] = &r
	s.mu.Unlock()
	defer lockStripe(&s.podStripes, r.PodUID)()
	s.hostMu.Lock()
	defer s.hostMu.Unlock()
	return s.kernel.AddHostIPs(redirect.Netns(s.ambient.Host), podAddrs(&r)...)
}
