package istiovalues

import (
	"embed"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// profiles are the istio-cni chart's profile files, copied from the Istio
// release test/istio pins (test/deploy fails when they differ): Istio's
// chart reads `profile`, `compatibilityVersion` and `platform` (or their
// `global.` forms) through them, so the conversion must too.
//
//go:embed profiles/profile-*.yaml
var profiles embed.FS

func profile(kind, name string) (map[string]any, error) {
	b, err := profiles.ReadFile("profiles/profile-" + kind + name + ".yaml")
	if err != nil {
		var names []string
		entries, _ := profiles.ReadDir("profiles")
		for _, e := range entries {
			n := strings.TrimSuffix(strings.TrimPrefix(e.Name(), "profile-"), ".yaml")
			if rest, ok := strings.CutPrefix(n, kind); ok && (kind != "" || !strings.Contains(n, "-")) {
				names = append(names, rest)
			}
		}
		what := map[string]string{"": "profile", "platform-": "platform", "compatibility-version-": "compatibilityVersion"}[kind]
		return nil, fmt.Errorf("%s %q: Istio's istio-cni chart has %s, and fails on any other", what, name, strings.Join(names, ", "))
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read Istio's profile %s%s: %w", kind, name, err)
	}
	return m, nil
}

// layered is what Istio's istio-cni chart renders from a values file
// (zzz_profile.yaml, zzy_descope_legacy.yaml): the defaults block, the
// profile, compatibility and platform files over it, the user's values
// over those, and then everything under `cni:` over the top level. A
// profile's `cni:` section therefore beats a top-level value the user
// set; the conversion keeps that, so the result renders what Istio's did.
func layered(doc map[string]any, platform bool) (map[string]any, error) {
	g := asMap(doc["global"])
	prof := map[string]any{}
	for _, l := range []struct{ kind, name string }{
		{"", str(doc["profile"], g["profile"])},
		{"compatibility-version-", str(doc["compatibilityVersion"])},
		{"platform-", str(doc["platform"], g["platform"])},
	} {
		if l.name == "" || (l.kind == "platform-" && !platform) {
			continue
		}
		p, err := profile(l.kind, l.name)
		if err != nil {
			return nil, err
		}
		merge(prof, p)
	}
	out := deepCopy(asMap(doc["_internal_defaults_do_not_set"]))
	merge(out, prof)
	user := maps.Clone(doc)
	delete(user, "_internal_defaults_do_not_set")
	merge(out, user)
	merge(out, deepCopy(asMap(out["cni"])))
	return out, nil
}

// str is the first non-empty string, as Helm's coalesce.
func str(vs ...any) string {
	for _, v := range vs {
		if s, ok := v.(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// merge is sprig's mustMergeOverwrite on values: maps merge key by key,
// anything else from src replaces; a null is no value (Helm drops it).
func merge(dst, src map[string]any) {
	for _, k := range slices.Sorted(maps.Keys(src)) {
		v := src[k]
		if v == nil {
			continue
		}
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
			v = deepCopy(sm)
		}
		dst[k] = v
	}
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sm, ok := v.(map[string]any); ok {
			v = deepCopy(sm)
		}
		out[k] = v
	}
	return out
}

func same(a, b any) bool { return reflect.DeepEqual(a, b) }
