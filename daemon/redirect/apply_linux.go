package redirect

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// Apply programs r into the network namespace ns: the table in one netlink
// transaction (nft.Apply: create exclusively when absent, else replace), so
// the pod sees the old ruleset or the new one, never a table half built.
// Applying the same ruleset again leaves the kernel in the same state. Like
// nft.Apply it never moves the caller's thread into ns, so it is safe to
// call from many goroutines at once.
//
// A ruleset with policy routes (TPROXY, ambient) has them programmed first
// (route_linux.go). That order is the safe one: a rule and route for a mark
// nothing sets yet change no packet's path, while nft rules that mark
// packets before their route exists would send marked replies out of the
// pod instead of back to the proxy. If adding the routes or the nft batch
// then fails, the rules and routes this Apply added are taken back, so a
// failed Apply leaves the netns as it found it (the previous table, if
// any, and the routes it had).
//
// Routes a previous ruleset needed and this one does not are pruned after
// the batch. A fresh table means a new pod (or one Remove cleaned up), so
// a ruleset without routes skips rtnetlink altogether on that path.
func Apply(ns netns.NsHandle, r *Ruleset) error {
	var added []policyRoute
	if len(r.routes) > 0 {
		var err error
		if added, err = ensureRoutes(ns, r.routes); err != nil {
			return errors.Join(fmt.Errorf("apply policy routes to netns fd %d: %w", int(ns), err), undoRoutes(ns, added))
		}
	}
	existed, err := nft.Apply(ns, r.table)
	if err != nil {
		if uerr := undoRoutes(ns, added); uerr != nil {
			return errors.Join(err, fmt.Errorf("after the failed apply, in netns fd %d: %w", int(ns), uerr))
		}
		return err
	}
	if existed || len(r.routes) > 0 {
		if err := pruneRoutes(ns, r.routes); err != nil {
			return fmt.Errorf("prune policy routes in netns fd %d: %w", int(ns), err)
		}
	}
	return nil
}

// Remove deletes table inet sluice from ns, then the policy routes Apply
// added there (the reverse of Apply's order, for the same reason). A table
// that is not there is not an error, and costs one GET and no commit.
func Remove(ns netns.NsHandle) error {
	if err := nft.Remove(ns, TableName); err != nil {
		return err
	}
	if err := pruneRoutes(ns, nil); err != nil {
		return fmt.Errorf("remove policy routes from netns fd %d: %w", int(ns), err)
	}
	return nil
}

// Verify reads table inet sluice in ns, and the policy routes, and compares
// them with r. It returns one human-readable item per difference, none when
// the kernel holds exactly r; the error is for failing to read at all.
//
// Rules are recognised by their tag and compared expression by expression
// (nft.Verify), so a rule someone replaced, one that went missing and one
// someone added are each named. Like Apply it never moves the caller's
// thread into ns.
func Verify(ns netns.NsHandle, r *Ruleset) ([]string, error) {
	drift, err := nft.Verify(ns, r.table)
	if err != nil {
		return nil, err
	}
	// A ruleset without routes still reports stale ones of ours: Apply
	// would prune them.
	routes, err := routeDrift(ns, r.routes)
	if err != nil {
		return nil, fmt.Errorf("verify policy routes in netns fd %d: %w", int(ns), err)
	}
	return append(drift, routes...), nil
}
