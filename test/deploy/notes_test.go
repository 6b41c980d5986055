package deploy

import (
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/kubetest"
)

// NOTES name the image that runs, not the chart's appVersion: under
// image.tag or image.digest they differ. global.tag, Istio's release, is
// said not to be read.
func TestNotesNameTheImage(t *testing.T) {
	home := t.TempDir()
	env := []string{"HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
	digest := "sha256:" + strings.Repeat("cd", 32)
	for set, want := range map[string][]string{
		"image.tag=v9.9.9":                {"ghcr.io/sluicemesh/sluice:v9.9.9"},
		"image.digest=" + digest:          {"ghcr.io/sluicemesh/sluice@" + digest},
		"global.tag=1.27.0,variant=debug": {"ghcr.io/sluicemesh/sluice:0.1.0-debug", "global.tag (1.27.0) is Istio's release and is not read"},
	} {
		out, err := command(repoRoot, env, helmBin, "install", "notes", chartDir, "--namespace", "notes", "--set", set,
			"--dry-run=server", "--kubeconfig", kube.Kubeconfig(t, kubetest.Admin))
		if err != nil {
			t.Fatal(err)
		}
		notes := out[strings.Index(out, "NOTES:"):]
		for _, w := range want {
			if !strings.Contains(notes, w) {
				t.Errorf("--set %s: NOTES lack %q:\n%s", set, w, notes)
			}
		}
	}
}
