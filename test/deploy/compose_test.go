package deploy

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/installer"
)

// The chart as platform teams use it: a subchart of an umbrella that sets
// Istio's globals, values that override instead of duplicating, and a
// wrong agent flag refused at helm time in one line.

// TestUmbrellaChart installs the chart as a subchart: Helm passes it
// `global`, which the schema must accept, and global.hub and
// global.imagePullSecrets (Istio's names, strings) apply as istio-cni's.
func TestUmbrellaChart(t *testing.T) {
	dir := t.TempDir()
	umbrella := filepath.Join(dir, "platform")
	if err := os.MkdirAll(filepath.Join(umbrella, "charts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := command(repoRoot, nil, "cp", "-r", chartDir, filepath.Join(umbrella, "charts", "sluice")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	files := map[string]string{
		"Chart.yaml": "apiVersion: v2\nname: platform\nversion: 1.0.0\ndependencies:\n  - name: sluice\n    version: \">0.0.0-0\"\n",
		"values.yaml": `global:
  hub: mirror.example.com/istio
  tag: 1.27.0
  imagePullSecrets: [mirror-pull]
  istioNamespace: istio-system
  logAsJson: true
sluice:
  ambient: {enabled: true}
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(umbrella, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := command(repoRoot, nil, helmBin, append([]string{"template", "platform", umbrella, "--namespace", "istio-system"}, clusterFlags...)...)
	if err != nil {
		t.Fatalf("the umbrella chart does not render: %v", err)
	}
	objs, err := decodeAll([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	ds := rendered{raw: []byte(out), objects: objs}.daemonSet(t)
	spec := ds.Spec.Template.Spec
	if img := spec.Containers[0].Image; img != "mirror.example.com/istio/sluice:0.1.0" {
		t.Errorf("image %q, want global.hub's registry with sluice's own tag (global.tag is Istio's release)", img)
	}
	if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "mirror-pull" {
		t.Errorf("imagePullSecrets %+v, want global.imagePullSecrets' mirror-pull", spec.ImagePullSecrets)
	}
}

// TestPodMetadataOverridesDefaults: a podAnnotations or podLabels key the
// chart also sets replaces the chart's value, once in the YAML (a
// duplicated key is invalid YAML that some tools reject and others read
// either way); the selector's labels stay.
func TestPodMetadataOverridesDefaults(t *testing.T) {
	r := render(t, valueSet{name: "meta", namespace: "kube-system", values: `
podAnnotations: {prometheus.io/scrape: "false", team: mesh}
podLabels: {app: agent-of-sluice, app.kubernetes.io/name: other, tier: node}
`})
	for _, key := range []string{"prometheus.io/scrape:", "app:", "app.kubernetes.io/name:"} {
		if n := strings.Count(string(r.raw), "\n        "+key); n != 1 {
			t.Errorf("pod template has %d %q keys, want 1", n, key)
		}
	}
	meta := r.daemonSet(t).Spec.Template.ObjectMeta
	if meta.Annotations["prometheus.io/scrape"] != "false" || meta.Annotations["team"] != "mesh" || meta.Annotations["prometheus.io/path"] != "/metrics" {
		t.Errorf("annotations %v", meta.Annotations)
	}
	if meta.Labels["app"] != "agent-of-sluice" || meta.Labels["tier"] != "node" || meta.Labels["app.kubernetes.io/name"] != "sluice" {
		t.Errorf("labels %v: want podLabels over the chart's, the selector's kept", meta.Labels)
	}
}

// TestImageDigest: image.digest pulls by digest.
func TestImageDigest(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	ds := render(t, valueSet{name: "digest", namespace: "kube-system", values: "image: {digest: \"" + d + "\", hub: reg.example/x}\n"}).daemonSet(t)
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "reg.example/x/sluice@"+d {
		t.Errorf("image %q", img)
	}
}

// TestChartRefusesUnknownAgentFlags: a flag or SLUICE_ variable the agent
// does not have fails the render with one line naming it; everything else
// (another tool's env, a known flag) renders.
func TestChartRefusesUnknownAgentFlags(t *testing.T) {
	for set, name := range map[string]string{
		"extraArgs[0]=--max-inflght=9":     "--max-inflght",
		"env.SLUICE_MAX_INFLGHT=9":         "SLUICE_MAX_INFLGHT",
		"extraArgs[0]=--ambient=true":      "",
		"extraArgs[0]=-resync-interval=5s": "",
		"env.SLUICE_RESYNC_INTERVAL=5s":    "",
		"env.GODEBUG=madvdontneed=1":       "",
	} {
		out, err := command(repoRoot, nil, helmBin, append([]string{"template", "sluice", chartDir, "--set", set}, clusterFlags...)...)
		switch {
		case name == "" && err != nil:
			t.Errorf("--set %s refused: %v", set, err)
		case name == "" && err == nil:
		case err == nil:
			t.Errorf("--set %s rendered:\n%s", set, out)
		default:
			// helm's stderr: its one Error: line, and its own hint.
			var errLines []string
			for _, l := range strings.Split(err.Error(), "\n") {
				if strings.HasPrefix(l, "Error:") || strings.HasPrefix(l, "- ") {
					errLines = append(errLines, l)
				}
			}
			if msg := strings.Join(errLines, "\n"); len(errLines) != 1 || !strings.Contains(msg, name) {
				t.Errorf("--set %s: want one error line naming %s:\n%s", set, name, err)
			}
		}
	}
}

// TestChartFlagListMatchesAgent: the chart's list of agent flags (what
// extraArgs and env are checked against) is `sluice-agent --help`'s.
func TestChartFlagListMatchesAgent(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "templates/_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)define "sluice.agentFlags" -}}(.*?){{-`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no sluice.agentFlags in _helpers.tpl")
	}
	chart := strings.Fields(string(m[1]))
	slices.Sort(chart)
	agent := slices.Sorted(maps.Keys(agentFlags(t)))
	if !slices.Equal(chart, agent) {
		t.Errorf("sluice.agentFlags in %s/templates/_helpers.tpl lists the agent's flags: make it\n%s",
			chartDir, strings.Join(agent, " "))
	}
}

// TestNotesNameTheOwnConflist: NOTES.txt names the file the agent writes
// with chained=false.
func TestNotesNameTheOwnConflist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "templates/NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), installer.OwnConfName) {
		t.Errorf("NOTES.txt does not name %s, the conflist the agent writes with chained=false", installer.OwnConfName)
	}
}
