package istiovalues

import (
	"slices"
	"strings"
	"testing"
)

func convert(t *testing.T, in string) Result {
	t.Helper()
	r, err := Convert([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func get(m map[string]any, path string) any {
	var cur any = m
	for _, p := range strings.Split(path, ".") {
		mm, _ := cur.(map[string]any)
		cur = mm[p]
	}
	return cur
}

// Istio's three repair switches become one mode, in the order its repair
// controller tries them; none is off.
func TestRepairModes(t *testing.T) {
	for in, want := range map[string]string{
		"repair: {repairPods: true, deletePods: true}":                   "apply",
		"repair: {repairPods: false, deletePods: true, labelPods: true}": "delete",
		"repair: {repairPods: false, labelPods: true}":                   "label",
		"repair: {repairPods: false}":                                    "off",
	} {
		if got := get(convert(t, in).Values, "repair.mode"); got != want {
			t.Errorf("%s: repair.mode %v, want %s", in, got, want)
		}
	}
	r := convert(t, "repair: {labelPods: true, repairPods: false, brokenPodLabelKey: broken, brokenPodLabelValue: \"yes\"}")
	if got := get(r.Values, "repair.label"); got != "broken=yes" {
		t.Errorf("repair.label %v", got)
	}
}

// The layouts: the chart's defaults block, its top level and a cni:
// section, later ones winning; global beside them.
func TestLayouts(t *testing.T) {
	r := convert(t, `
_internal_defaults_do_not_set: {cniBinDir: /a, chained: true, logging: {level: info}}
cniBinDir: /b
cni: {cniBinDir: /c, logging: {level: "default:debug,ambient:info"}}
global: {hub: mirror.corp/istio, tag: 1.27.0, logAsJson: true, imagePullSecrets: [pull]}
`)
	for path, want := range map[string]any{"cniBinDir": "/c", "chained": true, "logLevel": "debug", "logFormat": "json",
		"global.hub": "mirror.corp/istio"} {
		if got := get(r.Values, path); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if get(r.Values, "image.tag") != nil || !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, "global.tag") }) {
		t.Errorf("global.tag converted or not named: %v %v", r.Values, r.Notes)
	}
}

// Values with no equivalent are named, never dropped silently; Istio's
// own registries are not a mirror.
func TestNotes(t *testing.T) {
	r := convert(t, `
hub: docker.io/istio
env: {HOST_PROBE_SNAT_IP: 169.254.7.127, AMBIENT_TPROXY_REDIRECTION: "true"}
ambient: {enabled: true, ipv6: false}
istioOwnedCNIConfig: true
bogus: 1
`)
	if get(r.Values, "image.hub") != nil {
		t.Error("Istio's registry converted into image.hub")
	}
	if get(r.Values, "env.HOST_PROBE_SNAT_IP") != "169.254.7.127" || get(r.Values, "env.AMBIENT_TPROXY_REDIRECTION") != nil {
		t.Errorf("env %v", get(r.Values, "env"))
	}
	for _, prefix := range []string{"hub:", "env.AMBIENT_TPROXY_REDIRECTION:", "istioOwnedCNIConfig:", "bogus:"} {
		if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, prefix) }) {
			t.Errorf("no note for %s in %q", prefix, r.Notes)
		}
	}
}

// Istio's documented install, `--set profile=ambient --set
// global.platform=k3s`, and the same as an IstioOperator, convert to
// ambient on k3s; an unknown profile fails as it does in Istio's chart.
func TestProfilesAndOperator(t *testing.T) {
	for _, in := range []string{
		"profile: ambient\nglobal: {platform: k3s}\n",
		"global: {profile: ambient}\nplatform: k3s\n",
		"apiVersion: install.istio.io/v1alpha1\nkind: IstioOperator\nspec: {profile: ambient, values: {global: {platform: k3s}}}\n",
	} {
		r := convert(t, in)
		if get(r.Values, "ambient.enabled") != true || get(r.Values, "platform") != "k3s" {
			t.Errorf("%q: %v", in, r.Values)
		}
		if slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "not an istio-cni value") }) {
			t.Errorf("%q: %q", in, r.Notes)
		}
	}
	for _, in := range []string{"profile: minimal\n", "global: {platform: eks}\n", "compatibilityVersion: \"0.1\"\n",
		"kind: IstioOperator\nspec: {profile: nope}\n"} {
		if _, err := Convert([]byte(in)); err == nil {
			t.Errorf("%q converted", in)
		}
	}
	r := convert(t, "kind: IstioOperator\nspec: {meshConfig: {}, components: {pilot: {enabled: true}}}\n")
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "installs no istio-cni") }) {
		t.Errorf("notes %q", r.Notes)
	}
}
