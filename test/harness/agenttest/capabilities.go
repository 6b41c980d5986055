package agenttest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// ChartCapabilities are the capabilities the shipped manifest
// (deploy/manifests/sluice.yaml under the module root, which hack/helm
// keeps equal to the chart's render) adds to the agent's container.
func ChartCapabilities(moduleRoot string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(moduleRoot, "deploy", "manifests", "sluice.yaml"))
	if err != nil {
		return nil, err
	}
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		var ds appsv1.DaemonSet
		if yaml.Unmarshal(doc, &ds) != nil || ds.Kind != "DaemonSet" {
			continue
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			if sc := c.SecurityContext; c.Name == "sluice-agent" && sc != nil && sc.Capabilities != nil {
				var out []string
				for _, add := range sc.Capabilities.Add {
					out = append(out, string(add))
				}
				return out, nil
			}
		}
	}
	return nil, fmt.Errorf("no sluice-agent container with capabilities in the shipped manifest")
}

// Capped is argv run as root with caps as its bounding set and nothing
// inheritable: what a container runtime gives a root process whose
// securityContext drops ALL and adds caps.
func Capped(caps []string, argv ...string) []string {
	bound := "-all"
	for _, c := range caps {
		bound += ",+" + strings.ToLower(c)
	}
	return append([]string{"setpriv", "--inh-caps", "-all", "--bounding-set", bound, "--"}, argv...)
}
