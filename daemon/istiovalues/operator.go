package istiovalues

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

func isIstioOperator(doc map[string]any) bool {
	api, _ := doc["apiVersion"].(string)
	return doc["kind"] == "IstioOperator" || strings.HasPrefix(api, "install.istio.io/")
}

// operatorProfiles is what each of istioctl's profiles
// (manifests/profiles/*.yaml) sets that istio-cni's chart reads: the
// chart's profile and global.platform.
var operatorProfiles = map[string][2]string{
	"default": {}, "minimal": {}, "empty": {},
	"demo": {"demo", ""}, "preview": {"preview", ""}, "remote": {"remote", ""}, "stable": {"stable", ""},
	"ambient": {"ambient", ""}, "openshift": {"", "openshift"}, "openshift-ambient": {"ambient", "openshift"},
}

// istioOperator turns an IstioOperator into the values istioctl gives
// istio-cni's chart: spec.values over what spec.profile sets, spec.hub,
// tag, revision and compatibilityVersion under their values names, and
// spec.components.cni.k8s's pod settings.
func (c *converter) istioOperator(doc map[string]any) (map[string]any, error) {
	spec := asMap(doc["spec"])
	vals := deepCopy(asMap(spec["values"]))
	g := child(vals, "global")
	p, _ := spec["profile"].(string)
	if p != "" {
		set, ok := operatorProfiles[p]
		if !ok {
			return nil, fmt.Errorf("spec.profile %q: istioctl has %s", p, strings.Join(slices.Sorted(maps.Keys(operatorProfiles)), ", "))
		}
		setIfUnset(vals, "profile", set[0])
		setIfUnset(g, "platform", set[1])
	}
	for from, to := range map[string]string{"hub": "hub", "tag": "tag"} {
		setIfUnset(g, to, spec[from])
	}
	setIfUnset(vals, "revision", spec["revision"])
	setIfUnset(vals, "compatibilityVersion", spec["compatibilityVersion"])
	components := asMap(spec["components"])
	c.operatorCNI(asMap(components["cni"]), p, child(vals, "cni"))
	c.noteOthers(spec, components)
	return vals, nil
}

// child is m[k] as a map, made when missing.
func child(m map[string]any, k string) map[string]any {
	v := asMap(m[k])
	if v == nil {
		v = map[string]any{}
		m[k] = v
	}
	return v
}

func setIfUnset(m map[string]any, k string, v any) {
	if _, ok := m[k]; !ok && !empty(v) {
		m[k] = v
	}
}

// operatorCNI converts spec.components.cni into the cni values: its image
// and what istioctl patches over the chart's pod.
func (c *converter) operatorCNI(cni map[string]any, profile string, cniVals map[string]any) {
	enabled, _ := cni["enabled"].(bool)
	if !enabled && profile != "ambient" && profile != "openshift" && profile != "openshift-ambient" {
		c.note("spec.components.cni.enabled: not true: this IstioOperator installs no istio-cni")
	}
	if ns, _ := cni["namespace"].(string); ns != "" {
		c.note("spec.components.cni.namespace: %s: install sluice's chart there (helm install -n %s)", ns, ns)
	}
	for _, k := range []string{"hub", "tag"} {
		if !empty(cni[k]) {
			cniVals[k] = cni[k]
		}
	}
	k8s := asMap(cni["k8s"])
	for _, k := range slices.Sorted(maps.Keys(k8s)) {
		switch k {
		case "resources", "tolerations", "affinity", "podAnnotations":
			cniVals[k] = k8s[k] // istioctl patches them over the chart's render
		case "nodeSelector", "priorityClassName":
			c.set(k, k8s[k])
		case "env":
			c.operatorEnv(k8s[k], child(cniVals, "env"))
		default:
			c.note("spec.components.cni.k8s.%s: not converted: sluice's chart has no such value (docs/install.md, Values)", k)
		}
	}
}

// operatorEnv converts k8s.env's name/value pairs; valueFrom ones are noted.
func (c *converter) operatorEnv(list any, env map[string]any) {
	items, _ := list.([]any)
	for _, e := range items {
		if m := asMap(e); m["name"] != nil && m["valueFrom"] == nil {
			env[strings.TrimSpace(str(m["name"]))] = m["value"]
		} else {
			c.note("spec.components.cni.k8s.env: %v is not converted: set it in extraEnv", e)
		}
	}
}

// noteOthers names the parts of the IstioOperator that are not istio-cni's.
func (c *converter) noteOthers(spec, components map[string]any) {
	var other []string
	for _, k := range slices.Sorted(maps.Keys(spec)) {
		switch k {
		case "values", "profile", "hub", "tag", "revision", "compatibilityVersion", "components", "namespace", "installPackagePath":
		default:
			other = append(other, "spec."+k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(components)) {
		if k != "cni" {
			other = append(other, "spec.components."+k)
		}
	}
	if len(other) > 0 {
		c.note("%s: not istio-cni's; ignored", strings.Join(other, ", "))
	}
}
