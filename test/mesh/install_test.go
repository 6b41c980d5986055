package mesh

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Where each part is installed: sluice where Istio's CNI agent goes, Istio
// where its charts expect.
const (
	releaseNS = "kube-system"
	istioNS   = "istio-system"
	agentApp  = "sluice-agent" // the DaemonSet pods' app label
	// istiodHost is the name istiod's serving certificate carries. The
	// node has no cluster DNS, so ztunnel dials istiod's Service IP and
	// checks the certificate against this name (ALT_XDS_HOSTNAME).
	istiodHost = "istiod.istio-system.svc"
)

// installMesh installs, in order, sluice (every pod after it goes through
// its plugin), Istio's CRDs, istiod with the ambient profile, and ztunnel
// (the real one, else the ZDS stand-in), each waited for.
func installMesh(ctx context.Context) error {
	steps := []struct {
		what string
		args []string
	}{
		{"sluice", append([]string{"install", "sluice", "deploy/helm/sluice", "-n", releaseNS}, sluiceValues()...)},
		// No default-revision validator: see istiodValues.
		{"Istio's CRDs", []string{"install", "istio-base", filepath.Join(charts, "base"), "-n", istioNS, "--create-namespace",
			"--set", "defaultRevision="}},
		{"istiod", append([]string{"install", "istiod", filepath.Join(charts, "istio-control", "istio-discovery"), "-n", istioNS}, istiodValues()...)},
	}
	for _, s := range steps {
		if out, err := helmRun(ctx, append(s.args, "--wait", "--timeout", "4m")...); err != nil {
			return fmt.Errorf("install %s: %w\n%s", s.what, err, out)
		}
	}
	if noZtunnel != nil {
		return installStandIn(ctx)
	}
	return installZtunnel(ctx)
}

// sluiceValues are sluice's chart values: the image built from this tree,
// never pulled, with ambient on.
func sluiceValues(extra ...string) []string {
	args := []string{
		"--set", "image.repository=" + images.SluiceRepo,
		"--set", "image.tag=" + images.SluiceTag,
		"--set", "image.pullPolicy=Never",
		"--set", "ambient.enabled=true",
		// TestAmbientPodWaitsForZtunnel's ztunnel comes back as a new pod
		// (scheduled, sandboxed, started), which on this shared machine can
		// take longer than the default 5 s; the plugin's deadline is 10 s.
		"--set", "extraArgs={--ztunnel-connect-wait=9s}",
	}
	for _, e := range extra {
		args = append(args, "--set", e)
	}
	return args
}

// istiodValues are the istio-discovery chart's values: the ambient
// profile as Istio documents it, the image built from Istio's module, and
// what a one-node test cluster needs (no autoscaler, small requests). The
// validation webhook is off: the API server runs outside the node and
// cannot reach a Service IP, and a webhook that cannot be called would
// refuse every AuthorizationPolicy.
func istiodValues() []string {
	return []string{
		"--set", "profile=ambient",
		"--set", "image=" + istiod.Ref,
		"--set", "global.imagePullPolicy=Never",
		"--set", "autoscaleEnabled=false",
		"--set", "resources.requests.cpu=100m",
		"--set", "resources.requests.memory=256Mi",
		"--set", "global.configValidation=false",
	}
}

// installZtunnel installs Istio's ztunnel chart with the image built from
// ztunnel's source, pointed at istiod's Service IP for both its CA and xDS.
func installZtunnel(ctx context.Context) error {
	cs, err := cluster.Client()
	if err != nil {
		return err
	}
	svc, err := cs.CoreV1().Services(istioNS).Get(ctx, "istiod", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("istiod's Service: %w", err)
	}
	addr := "https://" + svc.Spec.ClusterIP + ":15012"
	args := []string{"install", "ztunnel", filepath.Join(charts, "ztunnel"), "-n", istioNS,
		"--set", "image=" + ztunnelImage.Ref,
		"--set", "imagePullPolicy=Never",
		"--set", "resources.requests.cpu=50m",
		"--set", "resources.requests.memory=64Mi",
		"--set", "caAddress=" + addr,
		"--set", "xdsAddress=" + addr,
		"--set", "env.ALT_XDS_HOSTNAME=" + istiodHost,
		"--set", "env.ALT_CA_HOSTNAME=" + istiodHost,
		"--wait", "--timeout", "4m",
	}
	if out, err := helmRun(ctx, args...); err != nil {
		return fmt.Errorf("install ztunnel: %w\n%s", err, out)
	}
	return nil
}

// helmRun runs the cached helm binary against the cluster with a home of
// the cluster's own.
func helmRun(ctx context.Context, args ...string) (string, error) {
	return cluster.Helm(ctx, args...)
}

// waitFor polls cond every 200 ms until it returns nil or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %v waiting for %s: %w", timeout, what, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
