package deploy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
)

// gkeAPIServer fronts the test API server with one that reports a GKE git
// version ("-gke." in it, as GKE's does): helm template --kube-version
// drops a pre-release suffix, so only a server can say it.
func gkeAPIServer(t *testing.T) string {
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
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = rt
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.Request.URL.Path != "/version" {
			return nil
		}
		var v map[string]any
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
			return err
		}
		r.Body.Close()
		v["gitVersion"] = v["gitVersion"].(string) + "-gke.1000"
		b, _ := json.Marshal(v)
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		r.Header.Del("Content-Length")
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: gke, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {}}]
contexts: [{name: gke, context: {cluster: gke, user: u}}]
current-context: gke
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// With no platform set, a GKE API server makes the chart install the
// plugin into /home/kubernetes/bin, GKE's CNI bin dir, as istio-cni's chart
// detects it; the same chart against a plain server keeps /opt/cni/bin.
func TestPlatformGKEDetected(t *testing.T) {
	out, err := command(repoRoot, nil, helmBin, "template", "sluice", chartDir, "--namespace", "kube-system",
		"--validate", "--kubeconfig", gkeAPIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	ds := rendered{raw: []byte(out), objects: objs}.daemonSet(t)
	wantHostPath(t, ds, "/home/kubernetes/bin", "/host/cni/bin")
	wantHostPath(t, render(t, valueSet{name: "plain", namespace: "kube-system"}).daemonSet(t), "/opt/cni/bin", "/host/cni/bin")
}
