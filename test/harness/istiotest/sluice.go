package istiotest

import "strings"

// WithoutSluice drops the `table inet sluice { ... }` block from nft's
// listing.
func WithoutSluice(state string) []string {
	var out []string
	skip := false
	for _, l := range strings.Split(state, "\n") {
		switch {
		case l == "table inet sluice {":
			skip = true
		case skip && l == "}":
			skip = false
		case !skip:
			out = append(out, l)
		}
	}
	return out
}
