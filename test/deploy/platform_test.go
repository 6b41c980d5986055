package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Every platform preset renders a command line the agent accepts, and a
// value the operator sets wins over the preset. (test/istio checks each
// preset's paths against Istio's own platform profile.)
func TestPlatformRender(t *testing.T) {
	for _, p := range []string{"gke", "k3d", "k3s", "microk8s", "minikube", "openshift"} {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			ds := render(t, valueSet{name: p, namespace: "kube-system", values: "platform: " + p + "\n"}).daemonSet(t)
			if out, err := checkConfig(t, ds); err != nil || strings.TrimSpace(out) != "config ok" {
				t.Errorf("sluice-agent --check-config: %v\n%s", err, out)
			}
		})
	}
	t.Run("operator-wins", func(t *testing.T) {
		t.Parallel()
		ds := render(t, valueSet{name: "k3s-own-bin", namespace: "kube-system", values: "platform: k3s\ncniBinDir: /opt/k3s-cni\n"}).daemonSet(t)
		wantHostPath(t, ds, "/opt/k3s-cni", "/host/cni/bin")
		wantHostPath(t, ds, "/var/lib/rancher/k3s/agent/etc/cni/net.d", "/host/cni/net.d")
	})
}

// The chart defaults a preset replaces are written twice, in values.yaml
// and in _platform.tpl (a template cannot read values.yaml's defaults
// apart from the operator's values): they must agree.
func TestPlatformDefaultsMatchValues(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "templates", "_platform.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)define "sluice.platformDefaults" -}}\n(.*?)\n\{\{- end`).FindSubmatch(tpl)
	if block == nil {
		t.Fatal("no sluice.platformDefaults in _platform.tpl")
	}
	var defaults, vals map[string]any
	if err := yaml.Unmarshal(block[1], &defaults); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(values, &vals); err != nil {
		t.Fatal(err)
	}
	for k, v := range defaults {
		if vals[k] != v {
			t.Errorf("%s: values.yaml %v, _platform.tpl %v", k, vals[k], v)
		}
	}
}
