package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The capabilities the chart adds (wantCaps, held against every render by
// TestRender) are exactly those docs/install.md justifies, and fewer than
// istio-cni's agent gets from Istio's own chart, all among them. A
// capability added to the chart without a row in the docs fails here.
func TestCapabilitiesAreJustified(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	var documented []corev1.Capability
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\| ").FindAllSubmatch(b, -1) {
		documented = append(documented, corev1.Capability(m[1]))
	}
	slices.Sort(documented)
	if !slices.Equal(documented, wantCaps) {
		t.Errorf("docs/install.md justifies %v; the chart adds %v", documented, wantCaps)
	}

	istio := istioCNICapabilities(t)
	slices.Sort(istio)
	if !slices.Equal(istio, istioCNICaps) {
		t.Errorf("Istio's chart gives istio-cni %v, this test says %v", istio, istioCNICaps)
	}
	for _, c := range wantCaps {
		if !slices.Contains(istio, c) {
			t.Errorf("the chart adds %s, which istio-cni does not have", c)
		}
	}
	if len(wantCaps) >= len(istio) {
		t.Errorf("the chart adds %d capabilities, istio-cni %d: want fewer", len(wantCaps), len(istio))
	}
}

// istioCNICapabilities renders Istio's istio-cni chart (the module
// test/istio pins) and returns what its agent container adds.
func istioCNICapabilities(t *testing.T) []corev1.Capability {
	t.Helper()
	out, err := command(repoRoot, nil, helmBin, "template", "istio-cni", istioCNIChart(t), "--namespace", "istio-system")
	if err != nil {
		t.Fatalf("render Istio's istio-cni chart: %v", err)
	}
	objs, err := decodeAll([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			add, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "securityContext", "capabilities", "add")
			var caps []corev1.Capability
			for _, a := range add {
				caps = append(caps, corev1.Capability(a))
			}
			if len(caps) > 0 {
				return caps
			}
		}
	}
	t.Fatal("no container adding capabilities in Istio's istio-cni chart")
	return nil
}
