// Package istiovalues turns an istio-cni Helm values file into the sluice
// chart's values: `sluice-agent migrate-values`. It reads the istio-cni
// chart's own layout (flat, or under `_internal_defaults_do_not_set`), the
// `cni:` section of Istio's profiles and umbrella values, and `global:`.
// Every istio-cni value is either mapped or named in a note that says why
// it is not; nothing is dropped silently.
package istiovalues

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Result is the converted values and the notes for a person: values with
// no equivalent, and choices the conversion made.
type Result struct {
	Values map[string]any
	Notes  []string
}

// Convert reads an istio-cni values file, or an IstioOperator.
func Convert(in []byte) (Result, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(in, &doc); err != nil {
		return Result{}, fmt.Errorf("read istio-cni values: %w", err)
	}
	c := &converter{out: map[string]any{}}
	if isIstioOperator(doc) {
		var err error
		if doc, err = c.istioOperator(doc); err != nil {
			return Result{}, err
		}
	}
	vals, err := layered(doc, true)
	if err != nil {
		return Result{}, err
	}
	noPlatform, err := layered(doc, false)
	if err != nil {
		return Result{}, err
	}
	g := asMap(doc["global"])
	platform := str(doc["platform"], g["platform"])
	if platform != "" {
		c.set("platform", platform)
	}
	if p := str(doc["profile"], g["profile"]); p != "" {
		c.note("profile: %s: what Istio's profile-%s.yaml sets for istio-cni is converted below", p, p)
	}
	if v := str(doc["compatibilityVersion"]); v != "" {
		c.note("compatibilityVersion: %s: what Istio's compatibility profile sets for istio-cni is converted or noted below", v)
	}
	user := userKeys(doc)
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		v := vals[k]
		switch {
		case slices.Contains([]string{"global", "cni", "_internal_defaults_do_not_set", "profile", "platform", "compatibilityVersion"}, k):
		case platform != "" && slices.Contains(presetKeys, k) && !same(v, noPlatform[k]):
			// The platform profile's value, which sluice's platform preset
			// sets too (TestMigrateRendersAsIstio).
			if uv, ok := user[k]; ok && !same(uv, v) {
				c.note("%s: %v is not converted: Istio's platform-%s profile overrides it with %v (a profile's cni: section wins over top-level values), and so does sluice's platform %s; set %s in sluice's values to use yours", k, uv, platform, v, platform, k)
			}
		case !user.has(k) && !known(k):
			// another chart's value from one of Istio's profiles
		default:
			c.value(k, v, vals)
		}
	}
	global := asMap(vals["global"])
	for _, k := range slices.Sorted(maps.Keys(global)) {
		if k != "platform" && k != "profile" {
			c.global(k, global[k])
		}
	}
	return Result{Values: c.out, Notes: c.notes}, nil
}

// presetKeys are the values sluice's platform presets set as Istio's
// platform profiles do.
var presetKeys = []string{"cniBinDir", "cniConfDir", "cniNetnsDir", "chained", "provider", "seLinuxOptions", "resourceQuotas"}

// keySet is the top-level values the user's own file sets, each with the
// value its last layout gives (the cni: section's).
type keySet map[string]any

func (k keySet) has(key string) bool { _, ok := k[key]; return ok }

func userKeys(doc map[string]any) keySet {
	out := keySet{}
	for _, l := range []map[string]any{asMap(doc["_internal_defaults_do_not_set"]), doc, asMap(doc["cni"])} {
		for k, v := range l {
			if v != nil {
				out[k] = v
			}
		}
	}
	return out
}

// known is an istio-cni value the conversion maps or names.
func known(k string) bool {
	switch k {
	case "cniConfFileName", "hub", "pullPolicy", "variant", "logging", "ambient", "repair", "env":
		return true
	}
	return slices.Contains(Same, k) || Dropped[k] != ""
}

type converter struct {
	out   map[string]any
	notes []string
}

func (c *converter) set(path string, v any) {
	m := c.out
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}

func (c *converter) note(format string, a ...any) {
	c.notes = append(c.notes, fmt.Sprintf(format, a...))
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}
