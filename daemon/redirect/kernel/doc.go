// Package kernel is the one door from package redirect to the kernel:
// Netlink, the redirect.Kernel that programs a Ruleset into a pod's
// network namespace (the nftables table over nftnl, the policy routes and
// lo's addresses over rtnetlink), removes it and reads it back, and keeps
// the host probe table in the node's netns. Everything about what a
// ruleset holds is decided in package redirect, which is pure; this
// package only carries it to the kernel, and its tests (root, real
// namespaces) prove the kernel does what the rules say.
//
// Apply's order: policy routes and rules first (they carry rtnetlink
// protocol 115, so Remove finds them without the Spec, and are looked for
// before they are read, so most pods never open vishvananda/netlink's
// handle), then the nft batch, then lo's ::6 (created exclusively: EEXIST
// means it is there and is left alone). A failed Apply undoes exactly what
// it added. Remove is told what the record's ruleset had (Remove(ns,
// had)) and reads back only that; callers without the record pass nil and
// read everything. An agent killed mid-Remove, then a re-ADD without them,
// can leave a rule for a mark nothing sets and ::6 on lo: neither changes
// a packet's path. A fresh table skips lo's address prune. lo is ifindex
// 1 (constant since Linux 3.12); its IPv6 state is one address dump (lo
// holds ::1 exactly while IPv6 is on), the sysctl read only when lo has no
// IPv6 address. A netns handle <= 0 is refused: the libraries would take
// it as the calling thread's netns. Sockets are closed off the caller's
// path (closeLater, one closer goroutine, inline when its queue is full):
// closing a netfilter socket waits for queued releases, ~10 ms after a
// delete.
package kernel
