package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Every platform preset renders a command line the agent accepts.
// (test/istio checks each preset's paths against Istio's own platform
// profile; TestMigrateRendersAsIstio the whole of Istio's render.)
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
}

// A value the operator sets wins over the preset, also when it is what
// the chart uses with no platform (Helm cannot tell that from unset
// unless the chart's own default is empty).
func TestPlatformOperatorWins(t *testing.T) {
	for _, c := range []struct {
		name, values string
		check        func(t *testing.T, r rendered, ds *appsv1.DaemonSet)
	}{
		{"k3s-own-bin", "platform: k3s\ncniBinDir: /opt/k3s-cni\n", func(t *testing.T, _ rendered, ds *appsv1.DaemonSet) {
			wantHostPath(t, ds, "/opt/k3s-cni", "/host/cni/bin")
			wantHostPath(t, ds, "/var/lib/rancher/k3s/agent/etc/cni/net.d", "/host/cni/net.d")
		}},
		{"k3s-default-bin", "platform: k3s\ncniBinDir: /opt/cni/bin\n", func(t *testing.T, _ rendered, ds *appsv1.DaemonSet) {
			wantHostPath(t, ds, "/opt/cni/bin", "/host/cni/bin")
		}},
		{"minikube-default-netns", "platform: minikube\ncniNetnsDir: /var/run/netns\n", func(t *testing.T, _ rendered, ds *appsv1.DaemonSet) {
			wantHostPath(t, ds, "/var/run/netns", "/var/run/netns")
		}},
		{"openshift-chained", "platform: openshift\nchained: true\n", func(t *testing.T, r rendered, ds *appsv1.DaemonSet) {
			wantArgs(t, ds.Spec.Template.Spec.Containers[0], "--chained=true")
			noArg(t, ds.Spec.Template.Spec.Containers[0], "--cni-network-name")
			if _, ok := r.kinds(t)["NetworkAttachmentDefinition"]; ok {
				t.Error("a NetworkAttachmentDefinition with chained: true")
			}
		}},
		{"openshift-default-dirs", "platform: openshift\ncniBinDir: /opt/cni/bin\ncniConfDir: /etc/cni/net.d\nprovider: default\n", func(t *testing.T, _ rendered, ds *appsv1.DaemonSet) {
			wantHostPath(t, ds, "/opt/cni/bin", "/host/cni/bin")
			wantHostPath(t, ds, "/etc/cni/net.d", "/host/cni/net.d")
			wantArgs(t, ds.Spec.Template.Spec.Containers[0], "--chained=false")
		}},
		{"openshift-selinux", "platform: openshift\nseLinuxOptions: {level: \"s0:c1,c2\"}\n", func(t *testing.T, _ rendered, ds *appsv1.DaemonSet) {
			if o := ds.Spec.Template.Spec.Containers[0].SecurityContext.SELinuxOptions; o == nil || o.Type != "spc_t" || o.Level != "s0:c1,c2" {
				t.Errorf("seLinuxOptions %+v, want the preset's spc_t with the operator's level", o)
			}
		}},
		{"openshift-selinux-type", "platform: openshift\nseLinuxOptions: {type: container_runtime_t}\n", func(t *testing.T, _ rendered, ds *appsv1.DaemonSet) {
			if o := ds.Spec.Template.Spec.Containers[0].SecurityContext.SELinuxOptions; o == nil || o.Type != "container_runtime_t" {
				t.Errorf("seLinuxOptions %+v, want the operator's type", o)
			}
		}},
		{"gke-no-quota", "platform: gke\nresourceQuotas: {enabled: false}\n", func(t *testing.T, r rendered, _ *appsv1.DaemonSet) {
			if _, ok := r.kinds(t)["ResourceQuota"]; ok {
				t.Error("a ResourceQuota with resourceQuotas.enabled: false")
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, valueSet{name: c.name, namespace: "istio-system", values: c.values})
			c.check(t, r, r.daemonSet(t))
		})
	}
}

// platform: openshift gives what Istio's profile and chart give
// istio-cni: the spc_t SELinux type and `use` of the privileged SCC, so
// the pods are admitted without an `oc adm policy` by hand; other
// platforms get no SCC grant.
func TestPlatformOpenShiftAdmitted(t *testing.T) {
	for _, values := range []string{"platform: openshift\n", "global: {platform: openshift}\n"} {
		r := render(t, valueSet{name: "openshift", namespace: "istio-system", values: values})
		ds := r.daemonSet(t)
		if o := ds.Spec.Template.Spec.Containers[0].SecurityContext.SELinuxOptions; o == nil || o.Type != "spc_t" {
			t.Errorf("%s: seLinuxOptions %+v, want type spc_t", values, o)
		}
		kinds := r.kinds(t)
		role, binding := &rbacv1.Role{}, &rbacv1.RoleBinding{}
		if kinds["Role"] == nil || kinds["RoleBinding"] == nil {
			t.Fatalf("%s: no Role and RoleBinding in the render", values)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(kinds["Role"].Object, role); err != nil {
			t.Fatal(err)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(kinds["RoleBinding"].Object, binding); err != nil {
			t.Fatal(err)
		}
		want := rbacv1.PolicyRule{APIGroups: []string{"security.openshift.io"}, Resources: []string{"securitycontextconstraints"},
			ResourceNames: []string{"privileged"}, Verbs: []string{"use"}}
		if len(role.Rules) != 1 || !equalRule(role.Rules[0], want) || role.Namespace != "istio-system" {
			t.Errorf("%s: Role %s/%s rules %+v, want only %+v", values, role.Namespace, role.Name, role.Rules, want)
		}
		if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
			binding.Subjects[0].Name != ds.Spec.Template.Spec.ServiceAccountName || binding.Subjects[0].Namespace != "istio-system" {
			t.Errorf("%s: RoleBinding %+v does not bind %s to the agent's ServiceAccount", values, binding, role.Name)
		}
	}
	if _, ok := render(t, valueSet{name: "k3s", namespace: "istio-system", values: "platform: k3s\n"}).kinds(t)["Role"]; ok {
		t.Error("an SCC grant off OpenShift")
	}
}

func equalRule(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.ResourceNames, b.ResourceNames) && slices.Equal(a.Verbs, b.Verbs)
}

// platform: gke creates the ResourceQuota Istio's gke profile enables,
// which GKE needs to admit system-node-critical pods outside kube-system;
// in kube-system (admitted there, and where the quota would count every
// system DaemonSet's pods) it does not.
func TestPlatformGKEQuota(t *testing.T) {
	for ns, want := range map[string]bool{"istio-system": true, "kube-system": false} {
		_, got := render(t, valueSet{name: "gke-" + ns, namespace: ns, values: "platform: gke\n"}).kinds(t)["ResourceQuota"]
		if got != want {
			t.Errorf("platform gke in %s: ResourceQuota %v, want %v", ns, got, want)
		}
	}
	if _, got := render(t, valueSet{name: "gke-forced", namespace: "kube-system", values: "platform: gke\nresourceQuotas: {enabled: true}\n"}).kinds(t)["ResourceQuota"]; !got {
		t.Error("resourceQuotas.enabled: true in kube-system rendered no ResourceQuota")
	}
}

// The chart defaults a preset may fill are empty in values.yaml (Helm
// cannot tell a value set to a non-empty default from one left unset),
// and what they mean with no platform is written once, in _platform.tpl.
func TestPlatformDefaultsEmptyInValues(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "templates", "_platform.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	var presets, defaults, vals map[string]any
	for name, into := range map[string]*map[string]any{"sluice.platformPresets": &presets, "sluice.platformDefaults": &defaults} {
		block := regexp.MustCompile(`(?s)define "` + regexp.QuoteMeta(name) + `" -}}\n(.*?)\n\{\{- end`).FindSubmatch(tpl)
		if block == nil {
			t.Fatalf("no %s in _platform.tpl", name)
		}
		if err := yaml.Unmarshal(block[1], into); err != nil {
			t.Fatal(err)
		}
	}
	if err := yaml.Unmarshal(values, &vals); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, p := range presets {
		for k := range p.(map[string]any) {
			keys[k] = true
		}
	}
	for k := range defaults {
		keys[k] = true
	}
	for k := range keys {
		var v any
		switch k {
		case "seLinuxOptions":
			continue // a map: the operator's keys are merged over the preset's
		case "resourceQuotas":
			v, _ = lookup(vals, "resourceQuotas.enabled")
		default:
			v = vals[k]
		}
		if v != nil && v != "" {
			t.Errorf("values.yaml sets %s to %v: a preset could not tell it from a value the operator set", k, v)
		}
	}
}

// The resolved values are in place before any template reads them: a
// profile that turns ambient on grants the ClusterRole what ambient uses.
func TestResolvedBeforeEveryTemplate(t *testing.T) {
	r := render(t, valueSet{name: "profile-ambient", namespace: "istio-system", values: "profile: ambient\n"})
	wantArgs(t, r.daemonSet(t).Spec.Template.Spec.Containers[0], "--ambient=true")
	if !strings.Contains(string(r.raw), `resources: ["pods/status"]`) {
		t.Errorf("profile ambient: the ClusterRole does not grant pods/status:\n%s", r.raw)
	}
}
