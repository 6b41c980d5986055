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

// Convert reads an istio-cni values file.
func Convert(in []byte) (Result, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(in, &doc); err != nil {
		return Result{}, fmt.Errorf("read istio-cni values: %w", err)
	}
	cni, global := flatten(doc)
	c := &converter{out: map[string]any{}}
	for _, k := range slices.Sorted(maps.Keys(cni)) {
		c.value(k, cni[k], cni)
	}
	for _, k := range slices.Sorted(maps.Keys(global)) {
		c.global(k, global[k])
	}
	return Result{Values: c.out, Notes: c.notes}, nil
}

// flatten merges the layouts istio-cni values come in, later ones winning:
// the chart's defaults block, the chart's top level, a `cni:` section.
func flatten(doc map[string]any) (cni, global map[string]any) {
	cni, global = map[string]any{}, map[string]any{}
	layers := []map[string]any{asMap(doc["_internal_defaults_do_not_set"]), doc, asMap(doc["cni"])}
	for _, l := range layers {
		for k, v := range l {
			switch k {
			case "_internal_defaults_do_not_set", "cni":
			case "global":
				maps.Copy(global, asMap(v))
			default:
				cni[k] = v
			}
		}
	}
	return cni, global
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
