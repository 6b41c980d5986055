// Package nftnl translates one nftables table (package nft's model) to
// nf_tables netlink messages and back, for package kernel: the only
// importer its place under kernel allows.
//
// One transaction per change. A netns without our table (one GET to look)
// gets one batch that creates it exclusively: nothing is deleted, so no
// RCU grace period is paid on a new pod; if the table appears between the
// GET and the batch, the kernel refuses the batch whole (EEXIST) and the
// caller replaces. An existing table is replaced with add, delete, add,
// then everything, in one batch. Remove sends the delete alone, with no
// echo: a missing table is an ENOENT that commits nothing.
//
// google/nftables (v0.3.0) marshals every batch; batch_linux.go sends it
// with NLM_F_ACK on the last message only and no ECHO, where the library
// asks both of every message (~60 replies a pod table). The kernel reports
// every failing message before that ACK, so an error is still the errno of
// the message at fault; a socket is not reused after a failed batch. Set
// ids are fixed per set, not drawn from the library's global counter,
// which is not safe across concurrent Applies.
//
// Marshalled batches are cached by ruleset (64 entries, cleared when
// full), keyed by the ruleset's text and used only when the cached table
// is reflect.DeepEqual to the one asked for: the check, not the key, makes
// a hit safe. The delete batch is cached per table name (8).
//
// Verify reads a table back only when its netns's nftables generation
// moved (VerifySince): Apply learns its commit's generation from the
// NEWGEN echo of the batch's first message, a verify with no drift the
// generation it read first; 0 means unknown, and only a match means "no
// commit since". google/nftables drops a tproxy expression when decoding,
// so Verify compares everything else, the TPROXY port included.
package nftnl
