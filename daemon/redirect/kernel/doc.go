// Package kernel is the one door from package redirect to the kernel:
// Netlink, the redirect.Kernel that programs a Ruleset into a pod's
// network namespace (the nftables table over nftnl, the policy routes and
// lo's addresses over rtnetlink), removes it and reads it back, and keeps
// the host probe table in the node's netns. Everything about what a
// ruleset holds is decided in package redirect, which is pure; this
// package only carries it to the kernel, and its tests (root, real
// namespaces) prove the kernel does what the rules say.
package kernel
