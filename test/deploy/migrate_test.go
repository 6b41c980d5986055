package deploy

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// istioCNIChart is istio-cni's chart in the Istio module test/istio pins.
func istioCNIChart(t *testing.T) string {
	t.Helper()
	out, err := command(filepath.Join(repoRoot, "test/istio"), nil, "go", "mod", "download", "-json", "istio.io/istio")
	if err != nil {
		t.Fatalf("the Istio module test/istio pins: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	return filepath.Join(mod.Dir, "manifests/charts/istio-cni")
}

// TestMigrateIstioValues converts Istio's own istio-cni values.yaml and
// every profile it ships with sluice-agent migrate-values, and installs
// the sluice chart with each result: every one renders, the platform
// paths carry over, and no value of Istio's own file is unknown to the
// converter (a value Istio adds fails here until it is mapped or named).
func TestMigrateIstioValues(t *testing.T) {
	chart := istioCNIChart(t)
	files, _ := filepath.Glob(filepath.Join(chart, "files", "profile-*.yaml"))
	files = append(files, filepath.Join(chart, "values.yaml"))
	if len(files) < 8 {
		t.Fatalf("found %d istio-cni values files in %s", len(files), chart)
	}
	want := map[string]map[string]any{
		"values.yaml":               {"repair.mode": "apply", "repair.label": "cni.istio.io/uninitialized=true", "chained": true},
		"profile-platform-k3s.yaml": {"cniBinDir": "/var/lib/rancher/k3s/data/cni", "cniConfDir": "/var/lib/rancher/k3s/agent/etc/cni/net.d"},
		"profile-platform-openshift.yaml": {"chained": false, "provider": "multus", "cniBinDir": "/var/lib/cni/bin",
			"cniConfDir": "/etc/cni/multus/net.d", "seLinuxOptions.type": "spc_t"},
		"profile-platform-minikube.yaml": {"cniNetnsDir": "/var/run/docker/netns"},
		"profile-ambient.yaml":           {"ambient.enabled": true},
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := command(repoRoot, nil, agentBin, "migrate-values", f)
			if err != nil {
				t.Fatal(err)
			}
			if name == "values.yaml" && strings.Contains(out, "not an istio-cni value") {
				t.Errorf("Istio's own values.yaml has values the converter does not know:\n%s", out)
			}
			var values map[string]any
			if err := yaml.Unmarshal([]byte(out), &values); err != nil {
				t.Fatalf("output is not YAML: %v\n%s", err, out)
			}
			for path, v := range want[name] {
				if got, _ := lookup(values, path); got != v {
					t.Errorf("%s = %v, want %v\n%s", path, got, v, out)
				}
			}
			vs := valueSet{name: strings.TrimSuffix(name, ".yaml"), namespace: "istio-system", values: out}
			if vs.values == "" || strings.TrimSpace(strings.Join(nonComment(out), "")) == "{}" {
				vs.values = ""
			}
			ds := render(t, vs).daemonSet(t)
			checkDaemonSet(t, ds)
		})
	}
}

func nonComment(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}
