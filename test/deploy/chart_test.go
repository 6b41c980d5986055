package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/restmapper"
)

// The agent's capabilities, exactly: adding one needs a reason in
// docs/install.md's table (TestCapabilitiesAreJustified), a mode of
// test/e2e's TestEachChartCapabilityIsNeeded that fails without it, and
// an entry here.
var wantCaps = []corev1.Capability{"NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE"}

// istioCNICaps are the capabilities Istio's chart gives istio-cni's agent:
// sluice's are fewer, and among them.
var istioCNICaps = []corev1.Capability{"DAC_OVERRIDE", "NET_ADMIN", "NET_RAW", "SYS_ADMIN", "SYS_PTRACE"}

// Defaults of the agent's path flags the chart relies on without passing
// them; the host and the container must see these at the same path (the
// plugin on the host dials the socket, ztunnel on the host connects).
var agentPathDefaults = map[string]string{
	"--socket":         "/var/run/sluice/agent.sock",
	"--state-dir":      "/var/run/sluice/state",
	"--ztunnel-socket": "/var/run/ztunnel/ztunnel.sock",
}

func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"lint", chartDir, "--strict", "--namespace", vs.namespace}
			if vs.values != "" {
				args = append(args, "--values", valuesFile(t, vs))
			}
			if out, err := command(repoRoot, nil, helmBin, args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

func TestRender(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, vs)
			want := []string{"ClusterRole", "ClusterRoleBinding", "DaemonSet", "ServiceAccount"}
			if !strings.Contains(vs.values, "startupTaint: \"\"") {
				want = append(want, "ValidatingAdmissionPolicy/startup-taint", "ValidatingAdmissionPolicyBinding/startup-taint")
			}
			if !strings.Contains(vs.values, "nodeCondition: \"\"") {
				want = append(want, "ValidatingAdmissionPolicy/node-condition", "ValidatingAdmissionPolicyBinding/node-condition")
			}
			if strings.Contains(vs.values, "resourceQuotas") {
				want = append(want, "ResourceQuota")
			}
			if strings.Contains(vs.values, "networkPolicy: {enabled: true}") {
				want = append(want, "NetworkPolicy")
			}
			var got []string
			for kind, o := range r.kinds(t) {
				got = append(got, kind)
				switch o.GetKind() {
				case "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
					if o.GetNamespace() != "" {
						t.Errorf("%s has namespace %q", kind, o.GetNamespace())
					}
				default:
					// The plain manifests carry the namespace: kubectl
					// apply -f must not put them in "default".
					if o.GetNamespace() != vs.namespace {
						t.Errorf("%s in namespace %q, want %q", kind, o.GetNamespace(), vs.namespace)
					}
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("rendered kinds %v, want %v", got, want)
			}
			ds := r.daemonSet(t)
			checkDaemonSet(t, ds)
			checkBinding(t, r, ds, vs.namespace)
			if vs.check != nil {
				vs.check(t, ds)
			}
		})
	}
}

// checkDaemonSet holds what every render must: the agent's security
// posture, probes, identity and mounts, whatever the values.
func checkDaemonSet(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	if !spec.HostNetwork {
		t.Error("hostNetwork is off")
	}
	if spec.HostPID || spec.HostIPC {
		t.Errorf("hostPID %v hostIPC %v: the agent needs neither", spec.HostPID, spec.HostIPC)
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("updateStrategy %q, want RollingUpdate", ds.Spec.UpdateStrategy.Type)
	}
	if ds.Spec.Template.Labels["app"] != "sluice-agent" {
		t.Errorf("pod labels %v lack app=sluice-agent (docs/operations.md selects on it)", ds.Spec.Template.Labels)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template", k, v)
		}
	}
	if len(c.Command) != 1 || c.Command[0] != "/usr/local/bin/sluice-agent" {
		t.Errorf("command %q, want the agent at /usr/local/bin/sluice-agent (the plugin sits next to it)", c.Command)
	}

	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("container has no securityContext")
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Errorf("privileged = %v, want an explicit false", sc.Privileged)
	}
	if spec.SecurityContext != nil && spec.SecurityContext.SeccompProfile != nil &&
		spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccomp %+v overrides RuntimeDefault", spec.SecurityContext.SeccompProfile)
	}
	if sc.SeccompProfile == nil {
		t.Errorf("no seccompProfile: want RuntimeDefault unless the values say otherwise")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("runAsUser = %v, want 0", sc.RunAsUser)
	}
	if sc.Capabilities == nil {
		t.Fatal("no capabilities")
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop = %v, want [ALL]", sc.Capabilities.Drop)
	}
	add := slices.Clone(sc.Capabilities.Add)
	slices.Sort(add)
	if !slices.Equal(add, wantCaps) {
		t.Errorf("capabilities.add = %v, want exactly %v", add, wantCaps)
	}

	port := 9890
	if v, ok := argValue(c, "--health-addr"); ok {
		p, err := strconv.Atoi(v[strings.LastIndex(v, ":")+1:])
		if err != nil {
			t.Fatalf("--health-addr %q: %v", v, err)
		}
		port = p
	}
	for _, p := range []struct {
		name, path string
		probe      *corev1.Probe
	}{{"readiness", "/readyz", c.ReadinessProbe}, {"liveness", "/healthz", c.LivenessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.IntValue() != port {
			t.Errorf("%s probe GET %s on %s, want %s on %d", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path, port)
		}
	}

	downward := map[string]string{"NODE_NAME": "spec.nodeName", "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
	for _, e := range c.Env {
		if want, ok := downward[e.Name]; ok {
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != want {
				t.Errorf("env %s = %+v, want fieldRef %s", e.Name, e.ValueFrom, want)
			}
			delete(downward, e.Name)
		}
	}
	for name := range downward {
		t.Errorf("env %s missing", name)
	}

	// The host's /proc, read-only, where --host-proc says.
	hostProc, _ := argValue(c, "--host-proc")
	if m := mountOf(ds, "/host/proc"); hostProc != "/host/proc" || m == nil || !m.ReadOnly || hostPathOf(ds, m) != "/proc" {
		t.Errorf("--host-proc=%q with mount %+v: want the host's /proc read-only at /host/proc", hostProc, m)
	}
	// The host side is cniNetnsDir (checked per value set), mounted at its
	// own path, the one the runtime passes in CNI_NETNS, which the agent's
	// netns roots cover.
	var netnsMount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.Name == "netns" {
			netnsMount = &c.VolumeMounts[i]
		}
	}
	if m := netnsMount; m == nil || hostPathOf(ds, m) != m.MountPath ||
		m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("netns mount %+v: want the host path at its own path, HostToContainer", m)
	} else if roots, ok := argValue(c, "--netns-roots"); m.MountPath != "/var/run/netns" && (!ok || !strings.HasPrefix(roots, m.MountPath+",")) {
		t.Errorf("netns dir %s mounted, but --netns-roots is %q", m.MountPath, roots)
	}
	// Paths the host side uses too are mounted at their own host path.
	for flag, def := range agentPathDefaults {
		path, ok := argValue(c, flag)
		if !ok {
			path = def
		}
		if flag == "--ztunnel-socket" && !ok {
			continue // only with ambient on
		}
		host, m := hostPathFor(ds, path)
		if m == nil || host != path || m.ReadOnly {
			t.Errorf("%s=%s: host sees it at %q (mount %+v), want the same path, writable", flag, path, host, m)
		}
	}
	for _, flag := range []string{"--cni-bin-dir", "--cni-conf-dir"} {
		path, _ := argValue(c, flag)
		if host, m := hostPathFor(ds, path); m == nil || m.ReadOnly || host == "" {
			t.Errorf("%s=%q is not a writable host directory (mount %+v)", flag, path, m)
		}
	}
	if v, _ := argValue(c, "--kubeconfig"); v != "in-cluster" {
		t.Errorf("--kubeconfig=%q, want in-cluster", v)
	}
}

// checkBinding: the DaemonSet runs as the ServiceAccount the binding
// grants the ClusterRole to.
func checkBinding(t *testing.T, r rendered, ds *appsv1.DaemonSet, ns string) {
	t.Helper()
	k := r.kinds(t)
	var b rbacv1.ClusterRoleBinding
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(k["ClusterRoleBinding"].Object, &b); err != nil {
		t.Fatal(err)
	}
	sa := ds.Spec.Template.Spec.ServiceAccountName
	if k["ServiceAccount"].GetName() != sa {
		t.Errorf("DaemonSet runs as %q, ServiceAccount is %q", sa, k["ServiceAccount"].GetName())
	}
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != k["ClusterRole"].GetName() {
		t.Errorf("binding refers to %+v, ClusterRole is %q", b.RoleRef, k["ClusterRole"].GetName())
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
	if !reflect.DeepEqual(b.Subjects, want) {
		t.Errorf("binding subjects %+v, want %+v", b.Subjects, want)
	}
}

// TestServerAccepts sends every rendered object to a real kube-apiserver
// as a server-side dry-run create with strict field validation: a typo in
// a field name or a value the API rejects fails here, not in a cluster.
func TestServerAccepts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := kube.AdminConfig()
	cs := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			ensureNamespace(ctx, t, cs, vs.namespace)
			for _, o := range render(t, vs).objects {
				gvk := o.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Fatalf("%s: %v", gvk, err)
				}
				var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
				if o.GetNamespace() != "" {
					ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
				}
				_, err = ri.Create(ctx, o, metav1.CreateOptions{
					DryRun:          []string{metav1.DryRunAll},
					FieldValidation: metav1.FieldValidationStrict,
				})
				if err != nil {
					t.Errorf("%s %s: %v", gvk.Kind, o.GetName(), err)
				}
			}
		})
	}
}

func ensureNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// TestServiceAccountPermissions installs the default render for real and
// asks the API server what the agent's ServiceAccount may do: exactly the
// ClusterRole, through the binding the chart makes.
func TestServiceAccountPermissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(kube.AdminConfig())
	const ns = "sluice-perms"
	ensureNamespace(ctx, t, cs, ns)
	vs := valueSets[0]
	vs.namespace = ns
	r := render(t, vs)
	k := r.kinds(t)
	var sa corev1.ServiceAccount
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	for obj, into := range map[string]any{"ServiceAccount": &sa, "ClusterRole": &role, "ClusterRoleBinding": &binding} {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(k[obj].Object, into); err != nil {
			t.Fatal(err)
		}
	}
	// Unique names: this API server is shared with the other tests.
	role.Name, binding.Name, binding.RoleRef.Name = "perms-agent", "perms-agent", "perms-agent"
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + ns + ":" + sa.Name
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	// The default repair mode (apply) needs no write on pods at all.
	checks := []struct {
		group, resource, sub, verb, name string
		allowed                          bool
	}{
		{"", "pods", "", "get", "", true}, {"", "pods", "", "list", "", true}, {"", "pods", "", "watch", "", true},
		{"", "pods", "", "patch", "", false}, {"", "pods", "", "delete", "", false}, {"", "pods", "eviction", "create", "", false},
		{"", "pods", "status", "patch", "", false},
		{"", "namespaces", "", "list", "", true}, {"", "namespaces", "", "watch", "", true},
		{"", "events", "", "create", "", true}, {"events.k8s.io", "events", "", "patch", "", true},
		{"apps", "daemonsets", "", "get", "sluice-agent", true}, {"apps", "daemonsets", "", "get", "calico-node", false},
		{"", "pods", "", "create", "", false}, {"", "secrets", "", "get", "", false}, {"", "namespaces", "", "get", "", true},
		{"", "configmaps", "", "list", "", false}, {"apps", "daemonsets", "", "list", "", false}, {"", "nodes", "", "get", "", true}, {"", "nodes", "", "list", "", false},
		{"", "nodes", "", "patch", "", true}, {"", "nodes", "status", "patch", "", true}, {"", "nodes", "status", "update", "", false},
		{"", "nodes", "", "delete", "", false},
	}
	// The authorizer learns new roles and bindings from its own watch, a
	// moment after they are created: wait until it answers as the role says.
	var wrong []string
	nstest.Eventually(t, 10*time.Second, func() bool {
		wrong = wrong[:0]
		for _, c := range checks {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Group: c.group, Resource: c.resource, Subresource: c.sub,
					Verb: c.verb, Name: c.name, Namespace: "shop"},
			}}
			got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.Allowed != c.allowed {
				wrong = append(wrong, fmt.Sprintf("%s %s/%s.%s %s: allowed=%v, want %v (%s)", c.verb, c.resource, c.sub, c.group, c.name, got.Status.Allowed, c.allowed, got.Status.Reason))
			}
		}
		return len(wrong) == 0
	}, "the ServiceAccount's permissions differ from the role: %v", &wrong)
}

// TestClusterRoleMatchesRBACFile: each render grants a subset of what the
// policy tests run the agent with (deploy/rbac/clusterrole.yaml), and the
// renders over every repair mode and ambient together grant all of it.
func TestClusterRoleMatchesRBACFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/rbac/clusterrole.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := grants(obj.(*rbacv1.ClusterRole).Rules)
	union := map[string]bool{}
	sets := append(slices.Clone(valueSets), roleSets...)
	for _, vs := range sets {
		var got rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(render(t, vs).kinds(t)["ClusterRole"].Object, &got); err != nil {
			t.Fatal(err)
		}
		for g := range grants(got.Rules) {
			union[g] = true
			if !want[g] {
				t.Errorf("%s: the chart grants %s, which deploy/rbac/clusterrole.yaml does not", vs.name, g)
			}
		}
		for _, r := range got.Rules {
			if slices.Contains(r.Resources, "daemonsets") && !slices.Equal(r.ResourceNames, []string{got.Name}) {
				t.Errorf("%s: daemonsets rule %+v, want it narrowed to the chart's own %q", vs.name, r, got.Name)
			}
		}
	}
	for g := range want {
		if !union[g] {
			t.Errorf("deploy/rbac/clusterrole.yaml grants %s, which no render of the chart does", g)
		}
	}
	if got := render(t, valueSets[0]).kinds(t)["ClusterRole"].GetName(); got != obj.(*rbacv1.ClusterRole).Name {
		t.Errorf("default ClusterRole name %q, want %q", got, obj.(*rbacv1.ClusterRole).Name)
	}
}

// roleSets are the values that change the ClusterRole, beyond valueSets.
var roleSets = []valueSet{
	{name: "repair-label", namespace: "kube-system", values: "repair: {mode: label}\n"},
	{name: "repair-delete-role", namespace: "kube-system", values: "repair: {mode: delete}\n"},
	{name: "ambient-role", namespace: "kube-system", values: "ambient: {enabled: true}\n"},
}

// grants flattens rules to "verb group/resource" (resourceNames aside: the
// chart narrows what the file grants by name).
func grants(rules []rbacv1.PolicyRule) map[string]bool {
	out := map[string]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out[v+" "+g+"/"+res] = true
				}
			}
		}
	}
	return out
}

// Each repair mode gets exactly the pod write it uses.
func TestClusterRolePerRepairMode(t *testing.T) {
	for values, want := range map[string][]string{
		"repair: {mode: apply}\n":                  nil,
		"repair: {mode: label}\n":                  {"patch /pods/status"},
		"repair: {mode: delete}\n":                 {"create /pods/eviction"},
		"repair: {mode: delete, enabled: false}\n": nil,
		"repair: {mode: \"off\"}\n":                nil,
		"ambient: {enabled: true}\n":               {"patch /pods/status"},
	} {
		var role rbacv1.ClusterRole
		r := render(t, valueSet{name: "role", namespace: "kube-system", values: values})
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.kinds(t)["ClusterRole"].Object, &role); err != nil {
			t.Fatal(err)
		}
		var writes []string
		for g := range grants(role.Rules) {
			if strings.Contains(g, "/pods") && !strings.HasPrefix(g, "get ") && !strings.HasPrefix(g, "list ") && !strings.HasPrefix(g, "watch ") {
				writes = append(writes, g)
			}
		}
		slices.Sort(writes)
		if !slices.Equal(writes, want) {
			t.Errorf("%s: pod writes %v, want %v", strings.TrimSpace(values), writes, want)
		}
	}
}

// TestManifestsFresh: deploy/manifests/sluice.yaml is what the chart
// renders now (make manifests).
func TestManifestsFresh(t *testing.T) {
	fresh, err := command(repoRoot, nil, "hack/helm/manifests.sh", "-")
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join(repoRoot, "deploy/manifests/sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(committed) != fresh {
		t.Errorf("deploy/manifests/sluice.yaml is stale: run 'make manifests' (hack/helm/manifests.sh)")
	}
}

// TestSchemaRejects: values the agent would refuse fail at helm time.
func TestSchemaRejects(t *testing.T) {
	for _, set := range []string{"repair.mode=evict", "repair.moed=label", "ambient.enabeld=true", "misspelt=1", "variant=fat",
		"repair.label=novalue", "healthBind=eth0", "seLinuxOptions.typ=spc_t", "logFormat=xml", "logLevel=trace", "image.digest=sha256:abc", "imagePullSecrets[0].nme=x", "cniBinDir=opt/cni/bin", "cniConfFileName=a/b.conflist", "healthPort=0"} {
		if out, err := command(repoRoot, nil, helmBin, append([]string{"template", "sluice", chartDir, "--set", set}, clusterFlags...)...); err == nil {
			t.Errorf("--set %s rendered:\n%s", set, out)
		}
	}
}

// argValue returns the value of a --flag=value argument.
func argValue(c corev1.Container, flag string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

func wantArgs(t *testing.T, c corev1.Container, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(c.Args, w) {
			t.Errorf("args %q lack %q", c.Args, w)
		}
	}
}

func noArg(t *testing.T, c corev1.Container, flags ...string) {
	t.Helper()
	for _, f := range flags {
		if v, ok := argValue(c, f); ok {
			t.Errorf("unexpected %s=%s", f, v)
		}
	}
}

// mountOf is the container's volume mount at exactly path.
func mountOf(ds *appsv1.DaemonSet, path string) *corev1.VolumeMount {
	for i, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.MountPath == path {
			return &ds.Spec.Template.Spec.Containers[0].VolumeMounts[i]
		}
	}
	return nil
}

// hostPathOf is the host path behind a mount, or "" if it is not a hostPath.
func hostPathOf(ds *appsv1.DaemonSet, m *corev1.VolumeMount) string {
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == m.Name && v.HostPath != nil {
			return v.HostPath.Path
		}
	}
	return ""
}

// hostPathFor maps a container path to the host path it shows, through the
// deepest mount holding it.
func hostPathFor(ds *appsv1.DaemonSet, path string) (string, *corev1.VolumeMount) {
	var best *corev1.VolumeMount
	for i, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		if (path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/")) && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &ds.Spec.Template.Spec.Containers[0].VolumeMounts[i]
		}
	}
	if best == nil {
		return "", nil
	}
	host := hostPathOf(ds, best)
	if host == "" {
		return "", best
	}
	return host + strings.TrimPrefix(path, best.MountPath), best
}

func wantHostPath(t *testing.T, ds *appsv1.DaemonSet, host, container string) {
	t.Helper()
	m := mountOf(ds, container)
	if m == nil || hostPathOf(ds, m) != host {
		t.Errorf("%s: mount %+v, want the host's %s", container, m, host)
	}
}
