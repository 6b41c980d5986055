// Package installer keeps the sluice CNI plugin in place on a node: the
// plugin binary in every CNI bin directory, and the "sluice" entry in the
// CNI config the runtime reads. It runs inside sluice-agent and knows
// nothing of pods.
//
// Chained mode never edits the primary: it keeps our own
// "<stem>-sluice.conflist", the primary's network (name, cniVersion, every
// plugin byte for byte; a .conf listed) with the entry last, which sorts
// just before the primary ('-' before '.'), so the runtime uses it. A
// rewrite of the primary by its CNI, with the agent running or away (a
// reboot), never takes sluice out of the chain the runtime reads: ours
// follows it within a second, and a stale copy fails closed meanwhile
// (no agent, no ADD). Ours for a new primary is written before ours for
// the old one goes; with no primary at all ours stays (not ready), since
// removing it would let a primary written again before the agent reacts
// start pods uncaptured. Only a config under a new name that sorts before
// ours, written while the agent is away (a CNI migration), is used as it
// is until the agent is back. An entry an earlier version inserted into
// the primary is taken out once ours is in place; there is no option to
// insert into the primary again, as that is what opened the gap.
// Non-chained mode writes OwnConfName, which sorts last, with the sluice
// plugin alone. The byte-level edits live in package conflist: they keep every other plugin's bytes, and a
// second run gives the same bytes, so an unchanged file is never rewritten.
// Every file is published by temp file, fsync, rename and directory fsync,
// and every conflist is checked with libcni before the rename, so the
// runtime never reads a partial or broken file.
//
// Run watches the directories with fsnotify (plus a periodic resync) and
// repairs any change within a second. A primary that does not parse stays
// the primary (not ready, nothing written) rather than a reason to edit
// another file; a deleted primary is not recreated. Files the installer did
// not create are read without following links or blocking, at most
// maxConfSize bytes, and every rewrite of one is re-checked just before
// its rename so a concurrent write by its CNI is never reverted. Ready is
// true only while the binary (by hash) and our conflist are in place. Uninstall removes our conflists (and an
// earlier version's entry in the primary), never the binary.
//
// The primary is --cni-conf-name or the lexically first config that is
// not ours, valid or not, as containerd picks it (it also stops at an
// invalid first file): one that fails to parse is named with its cause
// and the installer resumes when it parses. A file at our conflist's name
// is replaced whatever it holds (without sluice, sorting first, it would
// start pods uncaptured); another "-sluice.conflist" is removed only if it
// holds a sluice entry. Our conflist is renamed into place only while the
// primary is the file it was built from, and a rewrite of a file we did
// not create compares inode and sha256 just before the rename; either
// starts over on a change (5 tries, then the next event). Symlinked
// configs are refused, never followed or replaced; our own files are
// replaced whatever is at their name. The conf dir and the bin dirs are opened once
// O_PATH|O_DIRECTORY and used through /proc/self/fd/<fd>; each sync
// re-opens the path with RESOLVE_NO_SYMLINKS (a link means not ready, a
// recreated real directory is pinned in its place). Configs are opened
// O_NONBLOCK|O_NOFOLLOW after an lstat, the type checked again on the fd.
// The binary's hash is taken once; the installed copy is re-hashed only
// when inode, size, mtime or ctime change. Events are debounced 50 ms and
// directories re-watched once recreated. A write counts as a restore only
// if the target was in place before and not merely following a rewrite of
// the primary; more than 5 restores of one file in a minute log a warning. Switching to chained mode removes the
// non-chained file, switching back removes our chained conflists once
// OwnConfName is in place, and 00-sluice.conflist is removed in both modes.
package installer
