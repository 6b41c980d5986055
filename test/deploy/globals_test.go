package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/test/harness/kubetest"
)

// Istio's globals, as an umbrella chart beside Istio's passes them, are
// read as Istio's charts read them: the platform's paths, the pull policy,
// the log level and format, the variant, the profile, the NetworkPolicy.
func TestUmbrellaGlobals(t *testing.T) {
	umbrella := filepath.Join(t.TempDir(), "platform")
	if err := os.MkdirAll(filepath.Join(umbrella, "charts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := command(repoRoot, nil, "cp", "-r", chartDir, filepath.Join(umbrella, "charts", "sluice")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	files := map[string]string{
		"Chart.yaml": "apiVersion: v2\nname: platform\nversion: 1.0.0\ndependencies:\n  - name: sluice\n    version: \">0.0.0-0\"\n",
		"values.yaml": `global:
  hub: mirror.example.com/istio
  tag: 1.27.0
  platform: k3s
  profile: ambient
  imagePullPolicy: Always
  variant: debug
  logging: {level: "default:debug,ambient:info"}
  logAsJson: true
  networkPolicy: {enabled: true}
  nativeNftables: true
  resourceScope: all
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(umbrella, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := command(repoRoot, nil, helmBin, "template", "platform", umbrella, "--namespace", "istio-system",
		"--validate", "--kubeconfig", kube.Kubeconfig(t, kubetest.Admin))
	if err != nil {
		t.Fatalf("the umbrella chart does not render: %v", err)
	}
	objs, err := decodeAll([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{raw: []byte(out), objects: objs}
	ds := r.daemonSet(t)
	c := ds.Spec.Template.Spec.Containers[0]
	if c.Image != "mirror.example.com/istio/sluice:0.1.0-debug" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %q pull %q, want global.hub's, sluice's tag, global.variant debug, global.imagePullPolicy", c.Image, c.ImagePullPolicy)
	}
	wantArgs(t, c, "--log-level=debug", "--log-format=json", "--ambient=true")
	wantHostPath(t, ds, "/var/lib/rancher/k3s/data/cni", "/host/cni/bin")
	wantHostPath(t, ds, "/var/lib/rancher/k3s/agent/etc/cni/net.d", "/host/cni/net.d")
	if _, ok := r.kinds(t)["NetworkPolicy"]; !ok {
		t.Error("global.networkPolicy.enabled rendered no NetworkPolicy")
	}
}

// The chart's own value wins over Istio's global.
func TestOwnValuesWinOverGlobals(t *testing.T) {
	r := render(t, valueSet{name: "own-over-global", namespace: "istio-system", values: `
global:
  platform: k3s
  profile: ambient
  imagePullPolicy: Always
  variant: debug
  logging: {level: debug}
  logAsJson: true
  networkPolicy: {enabled: true}
  defaultResources: {requests: {cpu: 1m}}
platform: microk8s
ambient: {enabled: false}
image: {pullPolicy: Never}
variant: distroless
logLevel: warn
logFormat: text
networkPolicy: {enabled: false}
`})
	ds := r.daemonSet(t)
	c := ds.Spec.Template.Spec.Containers[0]
	if c.Image != "ghcr.io/sluicemesh/sluice:0.1.0" || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("image %q pull %q, want the product image, Never", c.Image, c.ImagePullPolicy)
	}
	wantArgs(t, c, "--log-level=warn", "--log-format=text", "--ambient=false")
	wantHostPath(t, ds, "/var/snap/microk8s/current/opt/cni/bin", "/host/cni/bin")
	if _, ok := r.kinds(t)["NetworkPolicy"]; ok {
		t.Error("networkPolicy.enabled: false rendered a NetworkPolicy")
	}
	if c.Resources.Requests.Cpu().String() != "100m" {
		t.Errorf("resources %+v, want the chart's own over global.defaultResources", c.Resources)
	}
	// global.defaultResources applies where resources is null, as in Istio's charts.
	c = render(t, valueSet{name: "default-resources", namespace: "istio-system",
		values: "global: {defaultResources: {requests: {cpu: 7m}}}\nresources: null\n"}).daemonSet(t).Spec.Template.Spec.Containers[0]
	if c.Resources.Requests.Cpu().String() != "7m" {
		t.Errorf("resources %+v, want global.defaultResources", c.Resources)
	}
}

// What the chart cannot honour it refuses in one line naming the value:
// never accepted and ignored.
func TestChartRefusesWhatItCannotHonour(t *testing.T) {
	for values, name := range map[string]string{
		"ambient: {ipv6: false}\n":                        "ambient.ipv6",
		"global: {resourceScope: namespace}\n":            "global.resourceScope",
		"global: {variant: fips}\n":                       "global.variant",
		"global: {logging: {level: \"default:trace\"}}\n": "global.logging.level",
		"global: {imagePullPolicy: Sometimes}\n":          "global.imagePullPolicy",
		"profile: minimal\n":                              "profile",
		"global: {profile: nope}\n":                       "profile",
		"global: {platform: eks}\n":                       "platform",
	} {
		_, err := templateValues(t, values)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%q: %v, want the render refused naming %s", values, err, name)
		}
	}
	for _, values := range []string{"ambient: {ipv6: true}\n", "global: {resourceScope: all, variant: distroless, logging: {level: none}}\n", "profile: demo\n"} {
		if _, err := templateValues(t, values); err != nil {
			t.Errorf("%q refused: %v", values, err)
		}
	}
}

// Every variable istio-cni's agent reads (its flags as env, its env
// registrations, its chart's ConfigMap and env), taken from the pinned
// Istio, is either read by sluice-agent or refused in env: setting it on
// sluice's pod would do nothing.
func TestChartRefusesIstioEnv(t *testing.T) {
	read := []string{"HOST_PROBE_SNAT_IP", "HOST_PROBE_SNAT_IPV6", "NODE_NAME", "POD_NAME", "POD_NAMESPACE"}
	goRuntime := []string{"GOMEMLIMIT", "GOMAXPROCS"}
	names := istioEnvNames(t)
	if len(names) < 40 {
		t.Fatalf("read %d istio-cni variables from the pinned Istio: %v", len(names), names)
	}
	for _, name := range names {
		if slices.Contains(goRuntime, name) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := templateValues(t, "env: {"+name+": \"x\"}\n")
			switch {
			case slices.Contains(read, name) && err != nil:
				t.Errorf("env %s refused, which sluice-agent reads: %v", name, err)
			case !slices.Contains(read, name) && (err == nil || !strings.Contains(err.Error(), "env: "+name+" is istio-cni's variable")):
				t.Errorf("env %s: %v, want it refused as istio-cni's", name, err)
			}
		})
	}
}

// istioEnvNames is every variable istio-cni's agent and chart use.
func istioEnvNames(t *testing.T) []string {
	t.Helper()
	mod := filepath.Dir(filepath.Dir(filepath.Dir(istioCNIChart(t))))
	var names []string
	add := func(n string) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	consts, err := os.ReadFile(filepath.Join(mod, "cni/pkg/constants/constants.go"))
	if err != nil {
		t.Fatal(err)
	}
	// The "Command line arguments" block: viper reads each as FLAG_NAME.
	block := regexp.MustCompile(`(?s)// Command line arguments\nconst \((.*?)\n\)`).FindSubmatch(consts)
	if block == nil {
		t.Fatal("no command line arguments block in Istio's cni/pkg/constants")
	}
	for _, m := range regexp.MustCompile(`= "([a-z0-9-]+)"`).FindAllSubmatch(block[1], -1) {
		add(strings.ToUpper(strings.ReplaceAll(string(m[1]), "-", "_")))
	}
	err = filepath.WalkDir(filepath.Join(mod, "cni"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		for _, m := range regexp.MustCompile(`env\.Register[A-Za-z]*Var\("([A-Z0-9_]+)"`).FindAllSubmatch(b, -1) {
			add(string(m[1]))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	chart := istioCNIChart(t)
	cm, err := os.ReadFile(filepath.Join(chart, "templates/configmap-cni.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^  ([A-Z][A-Z0-9_]+):`).FindAllSubmatch(cm, -1) {
		add(string(m[1]))
	}
	ds, err := os.ReadFile(filepath.Join(chart, "templates/daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`- name: ([A-Z][A-Z0-9_]+)`).FindAllSubmatch(ds, -1) {
		add(string(m[1]))
	}
	slices.Sort(names)
	return names
}

// templateValues renders the chart with values, returning helm's error.
func templateValues(t *testing.T, values string) (string, error) {
	t.Helper()
	return command(repoRoot, nil, helmBin, "template", "sluice", chartDir, "--namespace", "istio-system",
		"--values", valuesFile(t, valueSet{name: "values", values: values}),
		"--validate", "--kubeconfig", kube.Kubeconfig(t, kubetest.Admin))
}
