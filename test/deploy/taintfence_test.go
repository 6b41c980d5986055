package deploy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/sluicemesh/sluice/daemon/nodetaint"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
)

// vapAPI is what helm's capabilities list when a cluster serves
// ValidatingAdmissionPolicy v1.
const vapAPI = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"

// clusterFlags tell an offline `helm template` what a cluster tells helm
// install: its version, and that it serves the startup-taint policy's API.
// The chart refuses to render without them (below).
var clusterFlags = []string{"--kube-version", kubetest.Version, "--api-versions", vapAPI}

// grantsPatch reports whether a render's ClusterRole may patch resource
// ("nodes" for the startup taint, "nodes/status" for the node condition).
func grantsPatch(t *testing.T, r rendered, resource string) bool {
	t.Helper()
	role, ok := r.kinds(t)["ClusterRole"]
	if !ok {
		t.Fatal("no ClusterRole in the render")
	}
	rules, _ := role.Object["rules"].([]any)
	for _, rule := range rules {
		m, _ := rule.(map[string]any)
		if slices.Contains(strs(m["resources"]), resource) && slices.Contains(strs(m["verbs"]), "patch") {
			return true
		}
	}
	return false
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, s := range l {
		if s, ok := s.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func templateWith(t *testing.T, args ...string) (rendered, error) {
	t.Helper()
	out, err := command(repoRoot, nil, helmBin, append([]string{"template", "sluice", chartDir, "--namespace", "kube-system"}, args...)...)
	if err != nil {
		return rendered{}, err
	}
	objs, err := decodeAll([]byte(out))
	if err != nil {
		t.Fatalf("decode the render: %v\n%s", err, out)
	}
	return rendered{raw: []byte(out), objects: objs}, nil
}

// The chart grants nodes: patch (startup taint) and nodes/status: patch
// (node condition) only each with the admission policy that fences it, and
// renders a policy only for a cluster that serves its API (1.30+,
// admissionregistration.k8s.io/v1): an older cluster, or one that does not
// serve ValidatingAdmissionPolicy, gets no render at all rather than the
// patch alone. Without a startup taint or a node condition there is
// neither, and no need.
func TestChartRefusesClusterWithoutTaintPolicy(t *testing.T) {
	noAPI := []string{"--kube-version", kubetest.Version}
	for _, tc := range []struct {
		name        string
		args        []string
		refuse      string // "" renders
		taint, cond bool   // renders that policy and its patch
	}{
		{"1.37 serving the policy API", clusterFlags, "", true, true},
		{"1.30, a provider's suffix", []string{"--kube-version", "v1.30.4-eks-a737599", "--api-versions", vapAPI}, "", true, true},
		{"1.29", []string{"--kube-version", "1.29.9", "--api-versions", vapAPI}, "kubeVersion: >=1.30.0-0", false, false},
		{"no policy API", noAPI, "ValidatingAdmissionPolicy", false, false},
		{"no policy API, only its group", []string{"--kube-version", kubetest.Version, "--api-versions", "admissionregistration.k8s.io/v1"},
			"ValidatingAdmissionPolicy", false, false},
		{"no policy API, no startup taint", append(slices.Clip(noAPI), "--set", "startupTaint="), "nodeCondition=", false, false},
		{"no policy API, no node condition", append(slices.Clip(noAPI), "--set", "nodeCondition="), "startupTaint=", false, false},
		{"no policy API, neither", append(slices.Clip(noAPI), "--set", "startupTaint=", "--set", "nodeCondition="), "", false, false},
		{"serving, no node condition", append(slices.Clip(clusterFlags), "--set", "nodeCondition="), "", true, false},
		{"serving, no startup taint", append(slices.Clip(clusterFlags), "--set", "startupTaint="), "", false, true},
		{"no version given", []string{"--api-versions", vapAPI}, "kubeVersion", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := templateWith(t, tc.args...)
			if tc.refuse != "" {
				if err == nil {
					t.Fatalf("rendered, want refused for %q:\n%s", tc.refuse, r.raw)
				}
				if !strings.Contains(err.Error(), tc.refuse) {
					t.Errorf("refused without naming %q: %v", tc.refuse, err)
				}
				if strings.Contains(tc.refuse, "ValidatingAdmissionPolicy") && !strings.Contains(err.Error(), "--api-versions "+vapAPI) {
					t.Errorf("the refusal does not say how to render offline: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			k := r.kinds(t)
			for _, f := range []struct {
				fence, resource string
				want            bool
			}{{"startup-taint", "nodes", tc.taint}, {"node-condition", "nodes/status", tc.cond}} {
				_, policy := k["ValidatingAdmissionPolicy/"+f.fence]
				_, binding := k["ValidatingAdmissionPolicyBinding/"+f.fence]
				if patch := grantsPatch(t, r, f.resource); policy != f.want || binding != f.want || patch != f.want {
					t.Errorf("%s: policy %v, binding %v, %s: patch %v; want all %v", f.fence, policy, binding, f.resource, patch, f.want)
				}
			}
		})
	}
}

// The agent counts as the fence in force only the policy's refusal with
// nodetaint.FenceDenial, for the label its dry run adds: the chart's policy
// must refuse that label with that message.
func TestTaintPolicyRefusesTheAgentsProbe(t *testing.T) {
	r, err := templateWith(t, clusterFlags...)
	if err != nil {
		t.Fatal(err)
	}
	policy := r.kinds(t)["ValidatingAdmissionPolicy/startup-taint"]
	spec, _ := policy.Object["spec"].(map[string]any)
	validations, _ := spec["validations"].([]any)
	var found bool
	for _, v := range validations {
		m, _ := v.(map[string]any)
		if m["message"] == nodetaint.FenceDenial {
			found = true
			if expr, _ := m["expression"].(string); !strings.Contains(expr, "object.metadata.?labels == oldObject.metadata.?labels") {
				t.Errorf("the validation with the agent's message does not compare labels: %s", expr)
			}
		}
	}
	if !found {
		t.Errorf("no validation of the policy says %q (nodetaint.FenceDenial): the agent would never find its fence", nodetaint.FenceDenial)
	}
}

// Against a real API server, with helm reading the server's discovery as
// `helm install` does: served, the chart renders; hidden (a server that
// does not serve ValidatingAdmissionPolicy), it refuses.
func TestChartRefusesServerWithoutTaintPolicy(t *testing.T) {
	for _, hide := range []bool{false, true} {
		// Discovery cached on disk is keyed by the server's address only.
		env := []string{"KUBECACHEDIR=" + t.TempDir()}
		out, err := command(repoRoot, env, helmBin, "template", "sluice", chartDir, "--namespace", "kube-system",
			"--validate", "--kubeconfig", discoveryProxy(t, hide))
		switch {
		case !hide && err != nil:
			t.Errorf("the API server serves the policy API, yet: %v", err)
		case !hide && !strings.Contains(out, "kind: ValidatingAdmissionPolicyBinding"):
			t.Errorf("rendered without the policy binding:\n%s", out)
		case hide && err == nil:
			t.Errorf("rendered for a server without ValidatingAdmissionPolicy:\n%s", out)
		case hide && !strings.Contains(err.Error(), "does not serve it"):
			t.Errorf("refused for another reason: %v", err)
		}
	}
}

// discoveryProxy fronts the test API server; with hide, its discovery no
// longer lists validatingadmissionpolicies (nor their bindings). It turns
// aggregated discovery off (plain JSON Accept), so helm reads each group's
// resource list, which the proxy filters.
func discoveryProxy(t *testing.T, hide bool) string {
	t.Helper()
	cfg := kube.AdminConfig()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Transport: rt, Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		if hide && (r.In.URL.Path == "/api" || r.In.URL.Path == "/apis") {
			r.Out.Header.Set("Accept", "application/json")
		}
	}}
	proxy.ModifyResponse = func(r *http.Response) error {
		if !hide || r.Request.URL.Path != "/apis/admissionregistration.k8s.io/v1" {
			return nil
		}
		var l metav1.APIResourceList
		if err := json.NewDecoder(r.Body).Decode(&l); err != nil {
			return err
		}
		r.Body.Close()
		l.APIResources = slices.DeleteFunc(l.APIResources, func(res metav1.APIResource) bool {
			return strings.HasPrefix(res.Name, "validatingadmissionpolic")
		})
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		r.ContentLength = int64(len(b))
		r.Header.Del("Content-Length")
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: k, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {}}]
contexts: [{name: k, context: {cluster: k, user: u}}]
current-context: k
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}
