package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// valueSet is one way to install the chart: a release namespace, values as
// a person would write them in a values file, and what the DaemonSet must
// then look like beyond what every render must hold (checkDaemonSet).
type valueSet struct {
	name      string
	namespace string
	values    string
	check     func(t *testing.T, ds *appsv1.DaemonSet)
}

var valueSets = []valueSet{
	{
		name:      "defaults",
		namespace: "kube-system",
		check: func(t *testing.T, ds *appsv1.DaemonSet) {
			spec := ds.Spec.Template.Spec
			if spec.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName = %q, want system-node-critical", spec.PriorityClassName)
			}
			if len(spec.Tolerations) != 1 || spec.Tolerations[0] != (corev1.Toleration{Operator: corev1.TolerationOpExists}) {
				t.Errorf("tolerations = %+v, want one that tolerates every taint", spec.Tolerations)
			}
			if got := spec.NodeSelector["kubernetes.io/os"]; got != "linux" || len(spec.NodeSelector) != 1 {
				t.Errorf("nodeSelector = %v, want kubernetes.io/os=linux", spec.NodeSelector)
			}
			u := ds.Spec.UpdateStrategy
			if u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
				u.RollingUpdate.MaxUnavailable == nil || u.RollingUpdate.MaxUnavailable.String() != "1" {
				t.Errorf("updateStrategy = %+v, want RollingUpdate with maxUnavailable 1", u)
			}
			c := spec.Containers[0]
			if c.Image != "ghcr.io/sluicemesh/sluice:0.1.0" {
				t.Errorf("image = %q, want the chart's appVersion as tag", c.Image)
			}
			wantArgs(t, c, "--chained=true", "--exclude-namespaces=kube-system", "--repair-mode=apply",
				"--repair-label=sluice.dev/uncaptured=true", "--ambient=false", "--ambient-dns-capture=true",
				"--log-level=info", "--log-format=text", "--cni-bin-dir=/host/cni/bin", "--cni-conf-dir=/host/cni/net.d",
				"--health-addr=[$(HOST_IP)]:9890", "--startup-taint=cni.istio.io/not-ready")
			wantHostPath(t, ds, "/var/run/netns", "/var/run/netns")
			if c.SecurityContext.SeccompProfile == nil || c.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("seccompProfile = %+v, want RuntimeDefault", c.SecurityContext.SeccompProfile)
			}
			if envOf(c, "GOMEMLIMIT") != nil {
				t.Error("GOMEMLIMIT set with no memory limit")
			}
			noArg(t, c, "--cni-conf-name", "--ztunnel-socket")
			wantHostPath(t, ds, "/opt/cni/bin", "/host/cni/bin")
			wantHostPath(t, ds, "/etc/cni/net.d", "/host/cni/net.d")
			if m := mountOf(ds, "/var/run/ztunnel"); m != nil {
				t.Errorf("ztunnel socket dir mounted with ambient off: %+v", m)
			}
		},
	},
	{
		name:      "ambient",
		namespace: "istio-system",
		values: `
ambient:
  enabled: true
  dnsCapture: false
`,
		check: func(t *testing.T, ds *appsv1.DaemonSet) {
			c := ds.Spec.Template.Spec.Containers[0]
			wantArgs(t, c, "--ambient=true", "--ambient-dns-capture=false", "--ztunnel-socket=/var/run/ztunnel/ztunnel.sock")
			wantHostPath(t, ds, "/var/run/ztunnel", "/var/run/ztunnel")
		},
	},
	{
		name:      "not-chained",
		namespace: "kube-system",
		values:    "chained: false\n",
		check: func(t *testing.T, ds *appsv1.DaemonSet) {
			wantArgs(t, ds.Spec.Template.Spec.Containers[0], "--chained=false")
		},
	},
	{
		name:      "custom-dirs",
		namespace: "kube-system",
		values: `
cniBinDir: /home/kubernetes/bin
cniConfDir: /var/lib/rancher/k3s/agent/etc/cni/net.d
cniConfFileName: 10-calico.conflist
`,
		check: func(t *testing.T, ds *appsv1.DaemonSet) {
			wantArgs(t, ds.Spec.Template.Spec.Containers[0], "--cni-conf-name=10-calico.conflist")
			wantHostPath(t, ds, "/home/kubernetes/bin", "/host/cni/bin")
			wantHostPath(t, ds, "/var/lib/rancher/k3s/agent/etc/cni/net.d", "/host/cni/net.d")
		},
	},
	{
		name:      "repair-delete",
		namespace: "sluice-system",
		values: `
repair:
  mode: delete
logLevel: debug
logFormat: json
excludeNamespaces: [kube-system, calico-system, tigera-operator]
`,
		check: func(t *testing.T, ds *appsv1.DaemonSet) {
			wantArgs(t, ds.Spec.Template.Spec.Containers[0], "--repair-mode=delete", "--log-level=debug",
				"--log-format=json", "--exclude-namespaces=kube-system,calico-system,tigera-operator")
		},
	},
	{
		name:      "exclude-nothing",
		namespace: "kube-system",
		values:    "excludeNamespaces: []\n",
		check: func(t *testing.T, ds *appsv1.DaemonSet) {
			wantArgs(t, ds.Spec.Template.Spec.Containers[0], "--exclude-namespaces=")
		},
	},
	{
		name:      "no-startup-taint",
		namespace: "kube-system",
		values:    "startupTaint: \"\"\n",
		check: func(t *testing.T, ds *appsv1.DaemonSet) {
			wantArgs(t, ds.Spec.Template.Spec.Containers[0], "--startup-taint=")
		},
	},
	{
		name:      "no-node-condition",
		namespace: "kube-system",
		values:    "nodeCondition: \"\"\n",
		check: func(t *testing.T, ds *appsv1.DaemonSet) {
			wantArgs(t, ds.Spec.Template.Spec.Containers[0], "--node-condition=")
		},
	},
	{
		name:      "scheduling-and-extras",
		namespace: "sluice-system",
		values: `
fullnameOverride: mesh-cni
image:
  repository: registry.example.com/sluice
  tag: v9.9.9
  pullPolicy: Always
imagePullSecrets:
  - name: regcred
tolerations:
  - key: dedicated
    operator: Equal
    value: mesh
    effect: NoSchedule
nodeSelector:
  mesh.example.com/enabled: "true"
resources:
  requests: {cpu: 50m, memory: 64Mi}
  limits: {memory: 256Mi}
priorityClassName: mesh-critical
updateStrategy:
  type: RollingUpdate
  rollingUpdate:
    maxUnavailable: 10%
podAnnotations:
  example.com/team: mesh
podLabels:
  example.com/tier: node
appArmorProfile:
  type: Unconfined
resourceQuotas:
  enabled: true
healthPort: 19890
extraArgs: [--max-inflight=128]
extraEnv:
  - name: SLUICE_RESYNC_INTERVAL
    value: 30s
`,
		check: func(t *testing.T, ds *appsv1.DaemonSet) {
			spec := ds.Spec.Template.Spec
			if ds.Name != "mesh-cni" || spec.ServiceAccountName != "mesh-cni" {
				t.Errorf("name %q, serviceAccountName %q, want mesh-cni for both", ds.Name, spec.ServiceAccountName)
			}
			c := spec.Containers[0]
			if c.Image != "registry.example.com/sluice:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways {
				t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
			}
			if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "regcred" {
				t.Errorf("imagePullSecrets = %+v", spec.ImagePullSecrets)
			}
			if len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "dedicated" {
				t.Errorf("tolerations = %+v, want only the custom one", spec.Tolerations)
			}
			// Helm merges maps: the default kubernetes.io/os stays unless
			// set to null.
			if spec.NodeSelector["mesh.example.com/enabled"] != "true" || spec.NodeSelector["kubernetes.io/os"] != "linux" {
				t.Errorf("nodeSelector = %v, want the default and the custom label", spec.NodeSelector)
			}
			if spec.PriorityClassName != "mesh-critical" {
				t.Errorf("priorityClassName = %q", spec.PriorityClassName)
			}
			if c.Resources.Limits.Memory().String() != "256Mi" || c.Resources.Requests.Cpu().String() != "50m" {
				t.Errorf("resources = %+v", c.Resources)
			}
			if got := ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String(); got != "10%" {
				t.Errorf("maxUnavailable = %s, want 10%%", got)
			}
			meta := ds.Spec.Template.ObjectMeta
			if meta.Annotations["example.com/team"] != "mesh" || meta.Annotations["prometheus.io/port"] != "19890" {
				t.Errorf("pod annotations = %v", meta.Annotations)
			}
			if meta.Labels["example.com/tier"] != "node" {
				t.Errorf("pod labels = %v", meta.Labels)
			}
			if p := c.SecurityContext.AppArmorProfile; p == nil || p.Type != corev1.AppArmorProfileTypeUnconfined {
				t.Errorf("appArmorProfile = %+v, want Unconfined", p)
			}
			wantArgs(t, c, "--max-inflight=128", "--health-addr=[$(HOST_IP)]:19890")
			if e := envOf(c, "SLUICE_RESYNC_INTERVAL"); e == nil || e.Value != "30s" {
				t.Errorf("env = %+v, want SLUICE_RESYNC_INTERVAL=30s", c.Env)
			}
			if e := envOf(c, "GOMEMLIMIT"); e == nil || e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil ||
				e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
				t.Errorf("GOMEMLIMIT = %+v, want it from limits.memory", e)
			}
		},
	},
}

// operatorValues are the values an istio-cni operator looks for.
var operatorValues = valueSet{
	name:      "operator-values",
	namespace: "istio-system",
	values: `
revision: canary
variant: debug
cniNetnsDir: /run/netns
seLinuxOptions: {type: spc_t}
seccompProfile: {type: Localhost, localhostProfile: sluice.json}
appArmorProfile: {type: Localhost, localhostProfile: sluice}
appArmorAnnotation: true
daemonSetLabels: {team: mesh}
env: {SLUICE_MAX_INFLIGHT: "32", SLUICE_DRAIN_TIMEOUT: 5s}
networkPolicy: {enabled: true}
healthBind: all
repair:
  enabled: false
  label: cni.istio.io/uninitialized=true
`,
	check: func(t *testing.T, ds *appsv1.DaemonSet) {
		c := ds.Spec.Template.Spec.Containers[0]
		if ds.Name != "sluice-agent-canary" || ds.Labels["istio.io/rev"] != "canary" || ds.Labels["team"] != "mesh" {
			t.Errorf("DaemonSet %s labels %v: want the revision in the name and labels, and team=mesh", ds.Name, ds.Labels)
		}
		if c.Image != "ghcr.io/sluicemesh/sluice:0.1.0-debug" {
			t.Errorf("image %q, want the -debug variant", c.Image)
		}
		wantHostPath(t, ds, "/run/netns", "/run/netns")
		if o := c.SecurityContext.SELinuxOptions; o == nil || o.Type != "spc_t" {
			t.Errorf("seLinuxOptions = %+v", o)
		}
		if p := c.SecurityContext.SeccompProfile; p == nil || p.Type != corev1.SeccompProfileTypeLocalhost || p.LocalhostProfile == nil {
			t.Errorf("seccompProfile = %+v", p)
		}
		if a := ds.Spec.Template.Annotations["container.apparmor.security.beta.kubernetes.io/sluice-agent"]; a != "localhost/sluice" {
			t.Errorf("AppArmor annotation %q, want localhost/sluice", a)
		}
		for k, v := range map[string]string{"SLUICE_MAX_INFLIGHT": "32", "SLUICE_DRAIN_TIMEOUT": "5s"} {
			if e := envOf(c, k); e == nil || e.Value != v {
				t.Errorf("env %s = %+v, want %s", k, e, v)
			}
		}
		wantArgs(t, c, "--repair-mode=off", "--repair-label=cni.istio.io/uninitialized=true", "--health-addr=:9890")
	},
}

func init() { valueSets = append(valueSets, operatorValues) }

func envOf(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// rendered is one `helm template`.
type rendered struct {
	raw     []byte
	objects []*unstructured.Unstructured
}

// render runs helm template for vs and decodes every object.
func render(t *testing.T, vs valueSet) rendered {
	t.Helper()
	args := append([]string{"template", "sluice", chartDir, "--namespace", vs.namespace}, clusterFlags...)
	if vs.values != "" {
		args = append(args, "--values", valuesFile(t, vs))
	}
	out, err := command(repoRoot, nil, helmBin, args...)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	objs, err := decodeAll([]byte(out))
	if err != nil {
		t.Fatalf("decode the render: %v\n%s", err, out)
	}
	return rendered{raw: []byte(out), objects: objs}
}

func valuesFile(t *testing.T, vs valueSet) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), vs.name+".yaml")
	if err := os.WriteFile(path, []byte(vs.values), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// decodeAll splits a multi-document YAML stream into objects, skipping
// documents that hold only comments.
func decodeAll(b []byte) ([]*unstructured.Unstructured, error) {
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := d.Decode(&m); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// kinds returns the objects by kind; each kind the chart renders once,
// but for the admission policies and their bindings, one per node write
// the agent is granted, keyed "Kind/startup-taint" and
// "Kind/node-condition".
func (r rendered) kinds(t *testing.T) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, o := range r.objects {
		key := o.GetKind()
		if strings.HasPrefix(key, "ValidatingAdmissionPolicy") {
			for _, fence := range []string{"startup-taint", "node-condition"} {
				if strings.HasSuffix(o.GetName(), "-"+fence) {
					key += "/" + fence
				}
			}
		}
		if _, dup := m[key]; dup {
			t.Fatalf("two %s objects in one render", key)
		}
		m[key] = o
	}
	return m
}

func (r rendered) daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	u, ok := r.kinds(t)["DaemonSet"]
	if !ok {
		t.Fatal("no DaemonSet in the render")
	}
	ds := &appsv1.DaemonSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ds); err != nil {
		t.Fatalf("DaemonSet: %v", err)
	}
	if n := len(ds.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("DaemonSet has %d containers, want 1", n)
	}
	return ds
}
