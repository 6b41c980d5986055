// Package installer keeps the sluice CNI plugin in place on a node: the
// plugin binary in every CNI bin directory, and the "sluice" entry in the
// CNI config the runtime reads. It runs inside sluice-agent and knows
// nothing of pods.
//
// Chained mode inserts the entry as the last plugin of the primary conflist;
// a single-plugin .conf primary is never edited: the entry goes into our own
// "<stem>-sluice.conflist", which sorts just before it. Non-chained mode
// writes OwnConfName, which sorts last, with the sluice plugin alone. The byte-level edits
// live in package conflist: they keep every other plugin's bytes, and a
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
// maxConfSize bytes, and every rewrite of one is re-checked just before its
// rename so a concurrent write by its CNI is never reverted. Ready is true only while the binary (by hash)
// and the entry are in place. Uninstall removes only the entry, never the
// binary.
package installer
