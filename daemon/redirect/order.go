package redirect

import (
	"net/netip"
	"slices"
)

// The one order for port and prefix lists, wherever a list is kept:
// policy's Specs and the builder's sets sort the same way.

// SortedPorts sorts p in place and drops repeats.
func SortedPorts(p []uint16) []uint16 {
	slices.Sort(p)
	return slices.Compact(p)
}

// SortedPrefixes sorts p in place by address, then prefix length, and
// drops repeats.
func SortedPrefixes(p []netip.Prefix) []netip.Prefix {
	slices.SortFunc(p, comparePrefixes)
	return slices.Compact(p)
}

func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
