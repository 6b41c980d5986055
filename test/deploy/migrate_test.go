package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/sluicemesh/sluice/daemon/istiovalues"
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

// renderFacts is what decides where a CNI agent's plugin lands and which
// pods it captures, read from one render.
type renderFacts struct {
	BinDir, ConfDir, NetnsDir string
	Chained, Ambient          string
	SELinuxType               string
	SCCGrant, NAD, Quota      bool
}

// TestMigrateRendersAsIstio converts the values files Istio documents
// (`--set profile=ambient --set global.platform=<p>`, the top-level forms,
// an IstioOperator) with migrate-values, renders the result with sluice's
// chart, renders the same input with Istio's own istio-cni chart, and
// compares the host paths, chaining, ambient switch, SELinux type, SCC
// grant, Multus attachment and quota. GKE's are rendered against a
// server that reports GKE, which Istio's chart needs to pick GKE's bin dir.
func TestMigrateRendersAsIstio(t *testing.T) {
	type tc struct{ name, istio, sluiceIn string }
	var cases []tc
	for _, p := range []string{"gke", "k3d", "k3s", "microk8s", "minikube", "openshift"} {
		cases = append(cases,
			tc{"ambient-global-platform-" + p, "profile: ambient\nglobal: {platform: " + p + "}\n", ""},
			tc{"platform-" + p, "platform: " + p + "\n", ""},
			tc{"global-profile-platform-" + p, "global: {profile: ambient, platform: " + p + "}\ncni: {cniNetnsDir: /run/netns}\n", ""})
	}
	cases = append(cases,
		tc{"k3s-top-level-bin-dir", "platform: k3s\ncniBinDir: /opt/cni/bin\n", ""},
		tc{"k3s-cni-bin-dir", "platform: k3s\ncni: {cniBinDir: /opt/cni/bin}\n", ""},
		tc{"defaults-block", "_internal_defaults_do_not_set: {cniBinDir: /opt/cni/bin, chained: true, ambient: {enabled: false}}\nprofile: ambient\nplatform: microk8s\n", ""},
		tc{"istio-operator", "profile: ambient\nglobal: {platform: k3s}\ncni: {cniConfDir: /etc/cni/k3s.d}\n", `apiVersion: install.istio.io/v1alpha1
kind: IstioOperator
spec:
  profile: ambient
  components: {cni: {enabled: true, namespace: istio-system}}
  values:
    global: {platform: k3s}
    cni: {cniConfDir: /etc/cni/k3s.d}
`},
		tc{"istio-operator-openshift-ambient", "profile: ambient\nglobal: {platform: openshift}\n",
			"apiVersion: install.istio.io/v1alpha1\nkind: IstioOperator\nspec: {profile: openshift-ambient}\n"},
	)
	chart := istioCNIChart(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in := c.sluiceIn
			if in == "" {
				in = c.istio
			}
			file := valuesFile(t, valueSet{name: "in", values: in})
			converted, err := command(repoRoot, nil, agentBin, "migrate-values", file)
			if err != nil {
				t.Fatal(err)
			}
			var server []string
			if strings.Contains(c.name, "gke") {
				server = []string{"--validate", "--kubeconfig", gkeAPIServer(t)}
			}
			out, err := command(repoRoot, nil, helmBin, append([]string{"template", "istio-cni", chart, "--namespace", "istio-system",
				"--values", valuesFile(t, valueSet{name: "istio", values: c.istio})}, server...)...)
			if err != nil {
				t.Fatalf("Istio's chart: %v", err)
			}
			istio := istioFacts(t, out)
			var sluice renderFacts
			if server != nil {
				out, err = command(repoRoot, nil, helmBin, append([]string{"template", "sluice", chartDir, "--namespace", "istio-system",
					"--values", valuesFile(t, valueSet{name: "sluice", values: converted})}, server...)...)
				if err != nil {
					t.Fatalf("sluice's chart: %v", err)
				}
				sluice = sluiceFacts(t, out)
			} else {
				sluice = sluiceFacts(t, string(render(t, valueSet{name: "sluice", namespace: "istio-system", values: converted}).raw))
			}
			if sluice != istio {
				t.Errorf("migrate-values' result renders\n  %+v\nIstio's chart renders\n  %+v\nconverted:\n%s", sluice, istio, converted)
			}
		})
	}
}

func istioFacts(t *testing.T, out string) renderFacts {
	t.Helper()
	var f renderFacts
	objs, err := decodeAll([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "NetworkAttachmentDefinition":
			f.NAD = true
		case "ResourceQuota":
			f.Quota = true
		case "ConfigMap":
			data, _ := o.Object["data"].(map[string]any)
			f.Chained, _ = data["CHAINED_CNI_PLUGIN"].(string)
			f.Ambient, _ = data["AMBIENT_ENABLED"].(string)
		case "ClusterRole":
			f.SCCGrant = f.SCCGrant || strings.Contains(fmt.Sprint(o.Object["rules"]), "securitycontextconstraints")
		case "DaemonSet":
			ds := &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ds); err != nil {
				t.Fatal(err)
			}
			for _, v := range ds.Spec.Template.Spec.Volumes {
				if v.HostPath == nil {
					continue
				}
				switch v.Name {
				case "cni-bin-dir":
					f.BinDir = v.HostPath.Path
				case "cni-net-dir":
					f.ConfDir = v.HostPath.Path
				case "cni-netns-dir":
					f.NetnsDir = v.HostPath.Path
				}
			}
			if o := ds.Spec.Template.Spec.Containers[0].SecurityContext.SELinuxOptions; o != nil {
				f.SELinuxType = o.Type
			}
		}
	}
	return f
}

func sluiceFacts(t *testing.T, out string) renderFacts {
	t.Helper()
	objs, err := decodeAll([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{raw: []byte(out), objects: objs}
	kinds := r.kinds(t)
	ds := r.daemonSet(t)
	c := ds.Spec.Template.Spec.Containers[0]
	f := renderFacts{NAD: kinds["NetworkAttachmentDefinition"] != nil, Quota: kinds["ResourceQuota"] != nil,
		SCCGrant: kinds["Role"] != nil && strings.Contains(fmt.Sprint(kinds["Role"].Object["rules"]), "securitycontextconstraints")}
	f.Chained, _ = argValue(c, "--chained")
	f.Ambient, _ = argValue(c, "--ambient")
	f.BinDir, _ = hostPathFor(ds, "/host/cni/bin")
	f.ConfDir, _ = hostPathFor(ds, "/host/cni/net.d")
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "netns" && v.HostPath != nil {
			f.NetnsDir = v.HostPath.Path
		}
	}
	if o := c.SecurityContext.SELinuxOptions; o != nil {
		f.SELinuxType = o.Type
	}
	return f
}

// The profile facts migrate-values converts through (istiovalues'
// istioProfiles) are what Istio's own istio-cni chart files say: for every
// profile file of the pinned release, its cni: and global: sections and its
// top-level istio-cni values, no more and no less.
func TestMigrateProfilesAreIstios(t *testing.T) {
	chart := istioCNIChart(t)
	var values map[string]any
	if b, err := os.ReadFile(filepath.Join(chart, "values.yaml")); err != nil || yaml.Unmarshal(b, &values) != nil {
		t.Fatalf("Istio's istio-cni values.yaml: %v", err)
	}
	defaults, _ := values["_internal_defaults_do_not_set"].(map[string]any)
	files, _ := filepath.Glob(filepath.Join(chart, "files", "profile-*.yaml"))
	ours := istiovalues.ProfileFacts()
	if len(files) == 0 || len(files) != len(ours) {
		t.Errorf("Istio's chart has %d profile files, istiovalues knows %d", len(files), len(ours))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var prof map[string]any
		if err := yaml.Unmarshal(b, &prof); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want := map[string]any{}
		for k, v := range prof {
			if _, cniValue := defaults[k]; k == "cni" || k == "global" || cniValue {
				want[k] = v
			}
		}
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "profile-"), ".yaml")
		if got := ours[name]; !reflect.DeepEqual(got, want) {
			t.Errorf("profile %s: istiovalues has %v, Istio's file %s says %v", name, got, f, want)
		}
	}
}
