package repair

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// LabelUncaptured marks a pod found running without capture
// (--repair-mode=label), for an operator or a controller to act on.
const LabelUncaptured = "sluice.dev/uncaptured"

// Label is the label --repair-mode=label puts on a pod found running
// uncaptured (--repair-label KEY=VALUE).
type Label struct{ Key, Value string }

// DefaultLabel is sluice's own; IstioLabel is the one istio-cni's repair
// controller sets, for tooling that already watches it.
var (
	DefaultLabel = Label{Key: LabelUncaptured, Value: "true"}
	IstioLabel   = Label{Key: "cni.istio.io/uninitialized", Value: "true"}
)

// ParseLabel reads KEY=VALUE.
func ParseLabel(s string) (Label, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return Label{}, fmt.Errorf("repair label %q: want KEY=VALUE", s)
	}
	l := Label{Key: k, Value: v}
	return l, l.Validate()
}

// Validate checks the key and value as the API server would.
func (l Label) Validate() error {
	if errs := validation.IsQualifiedName(l.Key); len(errs) > 0 {
		return fmt.Errorf("repair label key %q: %s", l.Key, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(l.Value); len(errs) > 0 {
		return fmt.Errorf("repair label value %q: %s", l.Value, strings.Join(errs, "; "))
	}
	return nil
}

func (l Label) String() string { return l.Key + "=" + l.Value }

// On reports whether pod carries the label.
func (l Label) On(pod *corev1.Pod) bool {
	v, ok := pod.Labels[l.Key]
	return ok && v == l.Value
}
