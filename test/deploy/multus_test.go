package deploy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var (
	nadGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}
	crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// multusValues is Istio's OpenShift profile in this chart's words.
const multusValues = `
provider: multus
chained: false
cniConfDir: /etc/cni/multus/net.d
cniBinDir: /var/lib/cni/bin
`

// provider=multus renders the NAD Istio's injector names (default/istio-cni,
// or the configured name) with no config, and the agent names its own
// conflist's network after it; the agent accepts that command line. The
// default render has no NAD and no --cni-network-name.
func TestMultusRender(t *testing.T) {
	for _, tc := range []struct {
		name, values, nadNS, nadName string
	}{
		{"istio-defaults", multusValues, "default", "istio-cni"},
		{"custom-name", multusValues + "multus: {networkName: mesh-capture, namespace: mesh-system}\n", "mesh-system", "mesh-capture"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := render(t, valueSet{name: tc.name, namespace: "kube-system", values: tc.values})
			nad := r.kinds(t)["NetworkAttachmentDefinition"]
			if nad == nil {
				t.Fatalf("no NetworkAttachmentDefinition in the render:\n%s", r.raw)
			}
			if nad.GetAPIVersion() != "k8s.cni.cncf.io/v1" || nad.GetNamespace() != tc.nadNS || nad.GetName() != tc.nadName {
				t.Errorf("NAD %s %s/%s, want k8s.cni.cncf.io/v1 %s/%s", nad.GetAPIVersion(), nad.GetNamespace(), nad.GetName(), tc.nadNS, tc.nadName)
			}
			// No config: Multus reads the network from the file whose
			// name matches; an explicit empty spec for OpenShift's
			// admission policy.
			spec, found, err := unstructured.NestedMap(nad.Object, "spec")
			if err != nil || !found || len(spec) != 0 {
				t.Errorf("NAD spec %v (found %v, %v), want present and empty", spec, found, err)
			}
			ds := r.daemonSet(t)
			c := ds.Spec.Template.Spec.Containers[0]
			wantArgs(t, c, "--chained=false", "--cni-network-name="+tc.nadName)
			wantHostPath(t, ds, "/etc/cni/multus/net.d", "/host/cni/net.d")
			wantHostPath(t, ds, "/var/lib/cni/bin", "/host/cni/bin")
			if out, err := checkConfig(t, ds); err != nil || strings.TrimSpace(out) != "config ok" {
				t.Errorf("sluice-agent --check-config: %v\n%s", err, out)
			}
		})
	}
	t.Run("default-provider", func(t *testing.T) {
		t.Parallel()
		r := render(t, valueSet{name: "default-provider", namespace: "kube-system", values: "chained: false\n"})
		if nad, ok := r.kinds(t)["NetworkAttachmentDefinition"]; ok {
			t.Errorf("NAD %s rendered without provider: multus", nad.GetName())
		}
		noArg(t, r.daemonSet(t).Spec.Template.Spec.Containers[0], "--cni-network-name")
	})
}

// Values that cannot work fail at helm time with a reason: Multus with
// sluice chained after the primary (no file would carry the NAD's network), an
// unknown provider, a NAD name that is no Kubernetes name.
func TestMultusRenderRejects(t *testing.T) {
	for set, want := range map[string]string{
		"provider=multus": "chained: false",
		"provider=calico": "provider",
		"provider=multus,chained=false,multus.networkName=Istio_CNI": "networkName",
	} {
		out, err := command(repoRoot, nil, helmBin, append([]string{"template", "sluice", chartDir, "--set", set}, clusterFlags...)...)
		if err == nil {
			t.Errorf("--set %s rendered:\n%s", set, out)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: error does not name %q: %v", set, want, err)
		}
	}
}

// The chart does not ship the NAD CRD (Multus does): on an API server
// without it, helm install fails naming the kind and creates nothing; with
// it, the NAD is accepted under strict field validation, installed and read
// back with its empty spec, and uninstalled with the release.
func TestMultusInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dyn := dynamic.NewForConfigOrDie(kube.AdminConfig())
	const ns, release = "multus-install", "multus"
	kubeconfig := kube.Kubeconfig(t, kubetest.Admin)
	home := t.TempDir()
	env := []string{"HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(multusValues), 0o600); err != nil {
		t.Fatal(err)
	}
	helm := func(args ...string) (string, error) {
		args = append(args, "--kubeconfig", kubeconfig, "--namespace", ns)
		return command(repoRoot, env, helmBin, args...)
	}

	if _, err := dyn.Resource(crdGVR).Get(ctx, "network-attachment-definitions.k8s.cni.cncf.io", metav1.GetOptions{}); err == nil {
		t.Fatal("the NAD CRD is already installed: this test must see the API server without it first")
	}
	_, err := helm("install", release, chartDir, "--create-namespace", "--values", values)
	if err == nil || !strings.Contains(err.Error(), "NetworkAttachmentDefinition") {
		t.Fatalf("install without the NAD CRD = %v, want an error naming NetworkAttachmentDefinition", err)
	}
	if _, err := helm("status", release); err == nil {
		t.Fatal("a release exists after the failed install")
	}

	applyNADCRD(ctx, t, dyn)
	nad := render(t, valueSet{name: "multus", namespace: ns, values: multusValues}).kinds(t)["NetworkAttachmentDefinition"]
	if _, err := dyn.Resource(nadGVR).Namespace(nad.GetNamespace()).Create(ctx, nad, metav1.CreateOptions{
		DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict,
	}); err != nil {
		t.Fatalf("dry-run create of the rendered NAD: %v", err)
	}
	if out, err := helm("install", release, chartDir, "--create-namespace", "--values", values); err != nil {
		t.Fatalf("install with the NAD CRD: %v\n%s", err, out)
	}
	got, err := dyn.Resource(nadGVR).Namespace("default").Get(ctx, "istio-cni", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("installed NAD: %v", err)
	}
	if spec, found, _ := unstructured.NestedMap(got.Object, "spec"); !found || len(spec) != 0 {
		t.Errorf("stored NAD spec %v (found %v), want present and empty", spec, found)
	}
	if _, err := helm("uninstall", release, "--wait"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(nadGVR).Namespace("default").Get(ctx, "istio-cni", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("NAD after uninstall: %v, want NotFound", err)
	}
}

// applyNADCRD installs the NAD CRD for the rest of this API server's life
// and waits until the kind is served.
func applyNADCRD(ctx context.Context, t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "test/testdata/network-attachment-definition-crd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(b)
	if err != nil || len(objs) != 1 {
		t.Fatalf("decode the NAD CRD: %d objects, %v", len(objs), err)
	}
	if _, err := dyn.Resource(crdGVR).Create(ctx, objs[0], metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the NAD CRD: %v", err)
	}
	nstest.Eventually(t, 10*time.Second, func() bool {
		_, err := dyn.Resource(nadGVR).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil
	}, "NetworkAttachmentDefinitions never served")
}
