package istio

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// istioDir is the pinned Istio module's source.
func istioDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/istio").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("locate the istio.io/istio module: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// istioProfile is what one of Istio's platform profiles sets for istio-cni.
type istioProfile struct {
	CNI struct {
		CNIBinDir   *string `json:"cniBinDir"`
		CNIConfDir  *string `json:"cniConfDir"`
		CNINetnsDir *string `json:"cniNetnsDir"`
		Chained     *bool   `json:"chained"`
		Provider    *string `json:"provider"`
	} `json:"cni"`
}

// sluiceRender is what sluice's chart renders for a platform: the host
// paths of the agent's mounts and its args.
type sluiceRender struct {
	hostPaths map[string]string // container mount path -> host path
	args      []string
	raw       string
}

func renderSluice(t *testing.T, platform string) sluiceRender {
	t.Helper()
	// An offline render names a cluster the chart accepts, as make
	// manifests does (hack/helm/manifests.sh).
	out, err := exec.Command("../../hack/helm/helm.sh", "template", "sluice", "../../deploy/helm/sluice",
		"--namespace", "kube-system", "--kube-version", "1.30.0",
		"--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
		"--set", "platform="+platform).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template --set platform=%s: %v\n%s", platform, err, out)
	}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var ds appsv1.DaemonSet
		if yaml.Unmarshal([]byte(doc), &ds) != nil || ds.Kind != "DaemonSet" {
			continue
		}
		spec := ds.Spec.Template.Spec
		vols := map[string]string{}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				vols[v.Name] = v.HostPath.Path
			}
		}
		r := sluiceRender{hostPaths: map[string]string{}, args: spec.Containers[0].Args, raw: string(out)}
		for _, m := range spec.Containers[0].VolumeMounts {
			r.hostPaths[m.MountPath] = vols[m.Name]
		}
		return r
	}
	t.Fatalf("no DaemonSet in the render:\n%s", out)
	return sluiceRender{}
}

func (r sluiceRender) arg(flag string) string {
	for _, a := range r.args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// TestPlatformProfilesParity renders sluice's chart with platform=<p> for
// every platform profile Istio ships (manifests/helm-profiles) and checks
// that it uses the host paths, chaining and provider the profile gives
// istio-cni: the plugin must land where that platform's runtime looks.
// GKE's profile leaves cniBinDir to istio-cni's detection, which picks
// /home/kubernetes/bin on GKE.
func TestPlatformProfilesParity(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(istioDir(t), "manifests", "helm-profiles", "platform-*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("Istio's platform profiles: %v %v", files, err)
	}
	for _, f := range files {
		platform := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "platform-"), ".yaml")
		t.Run(platform, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var p istioProfile
			if err := yaml.Unmarshal(b, &p); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"bin": "/opt/cni/bin", "conf": "/etc/cni/net.d", "netns": "/var/run/netns",
				"chained": "true", "provider": "default"}
			set := func(k string, v *string) {
				if v != nil && *v != "" {
					want[k] = *v
				}
			}
			set("bin", p.CNI.CNIBinDir)
			set("conf", p.CNI.CNIConfDir)
			set("netns", p.CNI.CNINetnsDir)
			set("provider", p.CNI.Provider)
			if p.CNI.Chained != nil && !*p.CNI.Chained {
				want["chained"] = "false"
			}
			if platform == "gke" {
				want["bin"] = "/home/kubernetes/bin" // istio-cni's chart detects it
			}
			r := renderSluice(t, platform)
			got := map[string]string{"bin": r.hostPaths["/host/cni/bin"], "conf": r.hostPaths["/host/cni/net.d"],
				"netns": r.hostPaths[want["netns"]], "chained": r.arg("--chained"), "provider": "default"}
			if r.arg("--cni-network-name") != "" && strings.Contains(r.raw, "kind: NetworkAttachmentDefinition") {
				got["provider"] = "multus"
			}
			for k := range want {
				if got[k] != want[k] {
					t.Errorf("%s: sluice renders %q, Istio's profile %q", k, got[k], want[k])
				}
			}
			if want["netns"] != "/var/run/netns" && !strings.HasPrefix(r.arg("--netns-roots"), want["netns"]+",") {
				t.Errorf("netns dir %s mounted, but --netns-roots is %q", want["netns"], r.arg("--netns-roots"))
			}
		})
	}
}
