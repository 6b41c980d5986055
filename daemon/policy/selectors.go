package policy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// DefaultEnablementSelectors is Istio's chart default
// (istio-cni values ambient.enablementSelectors): a pod labelled
// istio.io/dataplane-mode=ambient, or any pod not labelled "none" in a
// namespace labelled ambient.
const DefaultEnablementSelectors = `- podSelector:
    matchLabels: {istio.io/dataplane-mode: ambient}
- podSelector:
    matchExpressions:
    - {key: istio.io/dataplane-mode, operator: NotIn, values: [none]}
  namespaceSelector:
    matchLabels: {istio.io/dataplane-mode: ambient}
`

// EnablementSelector is one of Istio's ambient enablement selectors: a pod
// is enrolled when its labels match PodSelector and its namespace's match
// NamespaceSelector. An empty selector matches everything.
type EnablementSelector struct {
	PodSelector       metav1.LabelSelector `json:"podSelector"`
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
}

// Selectors are compiled enablement selectors; a pod matching any one of
// them is ambient.
type Selectors struct {
	source []EnablementSelector
	pods   []labels.Selector
	nss    []labels.Selector
}

// ParseSelectors reads selectors in the format of Istio's chart value and
// its AMBIENT_ENABLEMENT_SELECTOR setting: a YAML (or JSON) list of
// {podSelector, namespaceSelector}.
func ParseSelectors(text string) (*Selectors, error) {
	var src []EnablementSelector
	if err := yaml.UnmarshalStrict([]byte(text), &src); err != nil {
		return nil, fmt.Errorf("ambient enablement selectors: %w", err)
	}
	s := &Selectors{source: src}
	for i, e := range src {
		p, err := metav1.LabelSelectorAsSelector(&e.PodSelector)
		if err != nil {
			return nil, fmt.Errorf("ambient enablement selector %d: podSelector: %w", i+1, err)
		}
		n, err := metav1.LabelSelectorAsSelector(&e.NamespaceSelector)
		if err != nil {
			return nil, fmt.Errorf("ambient enablement selector %d: namespaceSelector: %w", i+1, err)
		}
		s.pods, s.nss = append(s.pods, p), append(s.nss, n)
	}
	return s, nil
}

// MustParseSelectors is ParseSelectors for constants.
func MustParseSelectors(text string) *Selectors {
	s, err := ParseSelectors(text)
	if err != nil {
		panic(err)
	}
	return s
}

// Matches is Istio's enrolment rule: never a host-network pod or one with
// a sidecar; otherwise any selector whose pod and namespace parts both
// match. nsLabels is empty when the namespace is unknown.
func (s *Selectors) Matches(pod *corev1.Pod, nsLabels map[string]string) bool {
	if pod.Spec.HostNetwork {
		return false
	}
	if _, sidecar := pod.Annotations[annSidecarStatus]; sidecar {
		return false
	}
	for i := range s.pods {
		if s.pods[i].Matches(labels.Set(pod.Labels)) && s.nss[i].Matches(labels.Set(nsLabels)) {
			return true
		}
	}
	return false
}

// String is the selectors as Debug.Explain shows them.
func (s *Selectors) String() string {
	out, err := yaml.Marshal(s.source)
	if err != nil {
		return fmt.Sprintf("%v", s.source)
	}
	return string(out)
}
