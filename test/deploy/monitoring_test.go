package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The monitoring the chart ships: a PodMonitor or ServiceMonitor that
// selects the agent's pods, the alerts docs/operations.md lists (with for:
// clauses), and a dashboard whose queries name only metrics the agent
// exports. No PromQL parser is linked here (the project does not use
// promtool): expressions are checked for the metrics they name and for
// balanced brackets and quotes.

var monitoringOn = `
monitoring:
  podMonitor: {enabled: true, labels: {release: prom}}
  serviceMonitor: {enabled: true}
  prometheusRule: {enabled: true}
  dashboard: {enabled: true, namespace: grafana}
`

func TestMonitoringRenders(t *testing.T) {
	if kinds := render(t, valueSet{name: "off", namespace: "kube-system"}).kinds(t); kinds["PodMonitor"] != nil || kinds["PrometheusRule"] != nil || kinds["ConfigMap"] != nil {
		t.Error("monitoring objects rendered with the defaults")
	}
	r := render(t, valueSet{name: "monitoring", namespace: "kube-system", values: monitoringOn})
	k := r.kinds(t)
	ds := r.daemonSet(t)
	podLabels := ds.Spec.Template.Labels
	for _, kind := range []string{"PodMonitor", "ServiceMonitor", "Service"} {
		o := k[kind]
		if o == nil {
			t.Fatalf("no %s rendered", kind)
		}
		path := []string{"spec", "selector", "matchLabels"}
		if kind == "Service" {
			path = []string{"spec", "selector"}
		}
		sel, _, _ := unstructuredMap(o.Object, path...)
		if len(sel) == 0 {
			t.Errorf("%s selects nothing", kind)
		}
		for key, v := range sel {
			if podLabels[key] != v {
				t.Errorf("%s selects %s=%v, which the agent's pods lack (%v)", kind, key, v, podLabels)
			}
		}
	}
	if pm := k["PodMonitor"]; pm.GetLabels()["release"] != "prom" {
		t.Errorf("PodMonitor labels %v: want monitoring.podMonitor.labels", pm.GetLabels())
	}
	port := ds.Spec.Template.Spec.Containers[0].Ports[0]
	eps, _, _ := unstructuredSlice(k["PodMonitor"].Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != port.Name {
		t.Errorf("PodMonitor endpoints %v: want the container's port %q", eps, port.Name)
	}
	if cm := k["ConfigMap"]; cm.GetNamespace() != "grafana" || cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap in %q labelled %v", cm.GetNamespace(), cm.GetLabels())
	}
}

// exportedMetrics are the metrics docs/operations.md's table lists, which
// TestDocsMetrics holds to a running agent's /metrics.
func exportedMetrics(t *testing.T) []string {
	var out []string
	for _, row := range tableRows(t, "docs/operations.md", "## Metrics") {
		if strings.HasPrefix(row[0], "sluice_") {
			out = append(out, row[0])
		}
	}
	if len(out) < 10 {
		t.Fatalf("read only %d metrics from docs/operations.md", len(out))
	}
	return out
}

var metricName = regexp.MustCompile(`\bsluice_[a-z0-9_]+`)

// checkExpr fails for a metric the agent does not export and for
// unbalanced brackets or quotes.
func checkExpr(t *testing.T, where, expr string, exported []string) {
	t.Helper()
	names := metricName.FindAllString(expr, -1)
	if len(names) == 0 {
		t.Errorf("%s: %q names no sluice metric", where, expr)
	}
	for _, n := range names {
		base := n
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suffix); ok && slices.Contains(exported, b) {
				base = b
			}
		}
		if !slices.Contains(exported, base) {
			t.Errorf("%s: %q names %s, which the agent does not export", where, expr, n)
		}
	}
	var stack []rune
	inQuote := false
	for _, r := range expr {
		switch {
		case r == '"':
			inQuote = !inQuote
		case inQuote:
		case strings.ContainsRune("([{", r):
			stack = append(stack, r)
		case strings.ContainsRune(")]}", r):
			want := map[rune]rune{')': '(', ']': '[', '}': '{'}[r]
			if len(stack) == 0 || stack[len(stack)-1] != want {
				t.Errorf("%s: %q: unbalanced %c", where, expr, r)
				return
			}
			stack = stack[:len(stack)-1]
		}
	}
	if inQuote || len(stack) != 0 {
		t.Errorf("%s: %q: unclosed quote or bracket", where, expr)
	}
}

type alertRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// TestPrometheusRuleAlerts: every alert has a for: of a minute or more and
// a severity, names only exported metrics, and the alerts are the ones
// docs/operations.md lists, expression for expression.
func TestPrometheusRuleAlerts(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "files/alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.UnmarshalStrict(b, &rules); err != nil {
		t.Fatalf("files/alerts.yaml: %v", err)
	}
	exported := exportedMetrics(t)
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			checkExpr(t, r.Alert, r.Expr, exported)
			exprs = append(exprs, r.Expr)
			if d, err := time.ParseDuration(r.For); err != nil || d < time.Minute {
				t.Errorf("%s: for %q, want a minute or more (one scrape's blip must not page)", r.Alert, r.For)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: no summary or description", r.Alert)
			}
		}
	}
	docs := docsAlertExprs(t)
	for _, e := range docs {
		if !slices.Contains(exprs, e) {
			t.Errorf("docs/operations.md lists the alert %q, which files/alerts.yaml lacks", e)
		}
	}
	for _, e := range exprs {
		if !slices.Contains(docs, e) {
			t.Errorf("files/alerts.yaml alerts on %q, which docs/operations.md does not list", e)
		}
	}
}

// docsAlertExprs are the code spans naming sluice metrics in
// docs/operations.md's alert list.
func docsAlertExprs(t *testing.T) []string {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "Alerts, most important first:")
	end := strings.Index(s[start:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("no alert list in docs/operations.md")
	}
	var out []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(s[start:start+end], -1) {
		if strings.Contains(m[1], "sluice_") && strings.ContainsAny(m[1], "<>=") {
			out = append(out, m[1])
		}
	}
	return out
}

// TestDashboardQueries: the dashboard is Grafana JSON whose every query
// names only exported metrics.
func TestDashboardQueries(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "files/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("files/dashboard.json: %v", err)
	}
	if d.UID == "" || len(d.Panels) < 6 {
		t.Fatalf("dashboard uid %q with %d panels", d.UID, len(d.Panels))
	}
	exported := exportedMetrics(t)
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			checkExpr(t, "panel "+p.Title, q.Expr, exported)
		}
	}
}

func unstructuredMap(obj map[string]any, path ...string) (map[string]any, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	m, ok := cur.(map[string]any)
	return m, ok, nil
}

func unstructuredSlice(obj map[string]any, path ...string) ([]any, bool, error) {
	m, ok, _ := unstructuredMap(obj, path[:len(path)-1]...)
	if !ok {
		return nil, false, nil
	}
	s, ok := m[path[len(path)-1]].([]any)
	return s, ok, nil
}

// TestAlertRulesPassPromtool: Prometheus's own checker loads the chart's
// rules file (PromQL parsed, durations and templates read), and refuses a
// broken copy of it, so the check is one that can fail.
func TestAlertRulesPassPromtool(t *testing.T) {
	out, err := command(repoRoot, nil, "hack/promtool/promtool.sh")
	if err != nil {
		t.Fatalf("get promtool: %v", err)
	}
	promtool := strings.TrimSpace(out)
	rules := filepath.Join(repoRoot, chartDir, "files/alerts.yaml")
	if out, err := command(repoRoot, nil, promtool, "check", "rules", rules); err != nil {
		t.Fatalf("promtool check rules files/alerts.yaml: %v\n%s", err, out)
	}
	b, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "alerts.yaml")
	if err := os.WriteFile(broken, []byte(strings.Replace(string(b), "sluice_ready == 0", "sluice_ready == == 0", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := command(repoRoot, nil, promtool, "check", "rules", broken); err == nil {
		t.Fatal("promtool accepted a rule whose expression does not parse")
	}
}
