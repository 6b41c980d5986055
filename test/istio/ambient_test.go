package istio

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"istio.io/istio/cni/pkg/util"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
)

// selectorCorpus: Istio's chart default, and selectors an operator writes.
var selectorCorpus = []struct{ name, text string }{
	{"selector-default", policy.DefaultEnablementSelectors},
	{"selector-json", `[{"podSelector":{"matchLabels":{"team":"a"}}}]`},
	{"selector-namespace-only", "- namespaceSelector: {matchLabels: {mesh: ambient}}"},
	{"selector-exists", "- podSelector: {matchExpressions: [{key: mesh, operator: Exists}]}\n  namespaceSelector: {matchExpressions: [{key: legacy, operator: DoesNotExist}]}"},
	{"selector-empty-selector", "- {}"},
	{"selector-none", "[]"},
	{"selector-typo", "- podSelecter: {matchLabels: {team: a}}"},
	{"selector-bad-operator", "- podSelector: {matchExpressions: [{key: a, operator: Maybe}]}"},
}

func podWith(labels, ann map[string]string, hostNet bool) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: labels, Annotations: ann}, Spec: corev1.PodSpec{HostNetwork: hostNet}}
}

var selectorPods = []struct {
	name string
	pod  *corev1.Pod
	ns   map[string]string
}{
	{"plain", podWith(nil, nil, false), nil},
	{"pod-ambient", podWith(a("istio.io/dataplane-mode", "ambient"), nil, false), nil},
	{"ns-ambient", podWith(nil, nil, false), a("istio.io/dataplane-mode", "ambient")},
	{"pod-none-ns-ambient", podWith(a("istio.io/dataplane-mode", "none"), nil, false), a("istio.io/dataplane-mode", "ambient")},
	{"pod-other-ns-ambient", podWith(a("istio.io/dataplane-mode", "sidecar"), nil, false), a("istio.io/dataplane-mode", "ambient")},
	{"pod-ambient-ns-none", podWith(a("istio.io/dataplane-mode", "ambient"), nil, false), a("istio.io/dataplane-mode", "none")},
	{"sidecar-in-ambient-ns", podWith(nil, a("sidecar.istio.io/status", "{}"), false), a("istio.io/dataplane-mode", "ambient")},
	{"host-network", podWith(a("istio.io/dataplane-mode", "ambient"), nil, true), nil},
	{"team-a", podWith(a("team", "a", "mesh", "x"), nil, false), a("mesh", "ambient")},
	{"team-a-legacy-ns", podWith(a("team", "a", "mesh", "x"), nil, false), a("legacy", "true")},
}

// istioSelectors is istio-cni's reading of its AMBIENT_ENABLEMENT_SELECTOR.
func istioSelectors(text string) (*util.CompiledEnablementSelectors, error) {
	var sel []util.EnablementSelector
	if err := yaml.Unmarshal([]byte(text), &sel); err != nil {
		return nil, err
	}
	return util.NewCompiledEnablementSelectors(sel)
}

// TestAmbientSelectorParity compares which pods Istio's enablement
// selectors and sluice's enrol, selector by selector.
func TestAmbientSelectorParity(t *testing.T) {
	known := knownDifferences(t)
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-26s | %-56s | %s\n", "case", "Istio (enrolled pods)", "sluice")
	for _, sc := range selectorCorpus {
		is, ierr := istioSelectors(sc.text)
		ss, serr := policy.ParseSelectors(sc.text)
		istio, sluice := enrolled(is, ierr), enrolled(ss, serr)
		same := istio == sluice
		fmt.Fprintf(&table, "%-26s | %-56s | %s   [%s]\n", sc.name, istio, sluice, map[bool]string{true: "same", false: "DIFFERS"}[same])
		_, listed := known[sc.name]
		switch {
		case !same && !listed:
			t.Errorf("%s: Istio enrols %s, sluice %s; %s does not list the difference", sc.name, istio, sluice, compatDoc)
		case same && listed:
			t.Errorf("%s: %s lists a difference, but sluice now matches Istio: remove the row", sc.name, compatDoc)
		}
	}
	t.Log(table.String())
}

type matcher interface {
	Matches(*corev1.Pod, map[string]string) bool
}

// enrolled names the corpus pods m enrols, or says the selectors are refused.
func enrolled[M matcher](m M, err error) string {
	if err != nil {
		return "refused"
	}
	var out []string
	for _, p := range selectorPods {
		if m.Matches(p.pod, p.ns) {
			out = append(out, p.name)
		}
	}
	return "[" + strings.Join(out, " ") + "]"
}

// TestAmbientOptionParity compares the per-pod ambient booleans: Istio's
// CheckBooleanAnnotation against what sluice's policy puts in the Spec.
// DNS capture has a node-wide default the annotation overrides; bypass is
// off unless the annotation turns it on.
func TestAmbientOptionParity(t *testing.T) {
	for _, opt := range []struct {
		ann      string
		defaults []bool
		got      func(redirect.Spec) bool
	}{
		{"ambient.istio.io/dns-capture", []bool{false, true}, func(s redirect.Spec) bool { return s.CaptureDNS }},
		{"ambient.istio.io/bypass-inbound-capture", []bool{false}, func(s redirect.Spec) bool { return s.BypassInboundCapture }},
	} {
		for _, v := range []string{"true", "false", "1", "0", "t", "F", "TRUE", "True", "yes", "maybe", "", " true"} {
			for _, def := range opt.defaults {
				pod := podWith(a("istio.io/dataplane-mode", "ambient"), a(opt.ann, v), false)
				want := def
				if b, present := util.CheckBooleanAnnotation(pod, opt.ann); present {
					want = b
				}
				cfg := &policy.AmbientConfig{Base: redirect.DefaultAmbientSpec(), DNSCapture: def}
				d, err := policy.Rules{Sidecar: redirect.DefaultSpec(), Ambient: cfg}.Decide(pod, nil, nil)
				if err != nil || !d.Capture {
					t.Errorf("%s=%q: sluice did not enrol the pod: %v %s", opt.ann, v, err, d.Reason)
					continue
				}
				if got := opt.got(d.Spec); got != want {
					t.Errorf("%s=%q (node default %v): Istio %v, sluice %v", opt.ann, v, def, want, got)
				}
			}
		}
	}
}
