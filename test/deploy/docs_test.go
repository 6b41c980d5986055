package deploy

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// The operator-facing docs whose claims these tests hold to the code.
// benchmarks.md and docs/history/ are checked for links only
// (TestDocsLinksResolve): their figures are measurements, not claims on the
// code. decisions.md is checked for links and for the flags it names.
var operatorDocs = []string{"README.md", "docs/install.md", "docs/operations.md", "docs/security.md", "docs/migrate-from-istio-cni.md"}

// Flags of other tools that operator docs mention outside code blocks.
var foreignFlags = []string{"--set", "--namespace", "--values", "--target", "--reuse-values", // helm
	"--bin", "--runs", // hack/readytime
	"--keep", "--teardown", "--plugins", // hack/demo
	"--net",                               // nsenter
	"--socket-exists",                     // iptables' owner match
	"--features", "--no-default-features"} // cargo (hack/ztunnel)

// agentFlags parses `sluice-agent --help`: each flag and the default the
// help prints ("" when none; env-derived defaults as "$NAME").
func agentFlags(t *testing.T) map[string]string {
	t.Helper()
	out, _ := exec.Command(agentBin, "--help").CombinedOutput()
	flags := map[string]string{}
	name := regexp.MustCompile(`^  -([a-z0-9-]+)( [a-z]+)?$`)
	quoted := regexp.MustCompile(`\(default "([^"]*)"\)`)
	plain := regexp.MustCompile(`\(default ([^)"]+)\)`)
	var cur, kind string
	for _, line := range strings.Split(string(out), "\n") {
		if m := name.FindStringSubmatch(line); m != nil {
			cur, kind = m[1], strings.TrimSpace(m[2])
			flags[cur] = ""
			if kind == "" {
				flags[cur] = "false"
			}
			continue
		}
		if cur == "" {
			continue
		}
		if m := quoted.FindStringSubmatch(line); m != nil {
			flags[cur] = m[1]
		} else if ms := plain.FindAllStringSubmatch(line, -1); ms != nil {
			flags[cur] = ms[len(ms)-1][1] // "(default $NODE_NAME) (env …)" has one; bools "(default true)"
		}
	}
	if len(flags) < 20 {
		t.Fatalf("parsed only %d flags from --help:\n%s", len(flags), out)
	}
	return flags
}

// tableRows returns the rows of the markdown table under heading, each
// as its cells with surrounding backticks removed.
func tableRows(t *testing.T, doc, heading string) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, doc))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", doc, heading)
	}
	var rows [][]string
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), " | ") {
			cells = append(cells, strings.Trim(strings.TrimSpace(c), "`"))
		}
		rows = append(rows, cells)
	}
	if len(rows) < 2 {
		t.Fatalf("%s %q: no table", doc, heading)
	}
	return rows[1:] // the header
}

// TestDocsFlagsMatchHelp: the flags table in docs/operations.md lists
// every flag `sluice-agent --help` prints, with the same default.
func TestDocsFlagsMatchHelp(t *testing.T) {
	help := agentFlags(t)
	documented := map[string]bool{}
	for _, row := range tableRows(t, "docs/operations.md", "## Flags") {
		flag := strings.TrimPrefix(row[0], "--")
		documented[flag] = true
		want, ok := help[flag]
		switch {
		case !ok:
			t.Errorf("docs/operations.md documents --%s, which sluice-agent does not have", flag)
		case strings.Trim(row[1], `"`) != want:
			t.Errorf("docs/operations.md: --%s default %s, --help says %q", flag, row[1], want)
		}
	}
	for flag := range help {
		if !documented[flag] {
			t.Errorf("--%s is in --help but not in docs/operations.md's flags table", flag)
		}
	}
}

// TestDocsNameRealFlags: every --flag the operator docs mention in prose
// and tables (code blocks hold other tools' commands) is the agent's, a
// command's of it, or a known other tool's.
func TestDocsNameRealFlags(t *testing.T) {
	help := agentFlags(t)
	flag := regexp.MustCompile(`(^|[^a-zA-Z0-9-])--([a-z][a-z0-9-]+)`)
	// decisions.md too: a decision naming a flag the agent lost is stale.
	for _, doc := range append(slices.Clone(operatorDocs), "docs/decisions.md") {
		b, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		inCode := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
				continue
			}
			if inCode {
				continue
			}
			for _, m := range flag.FindAllStringSubmatch(line, -1) {
				name := m[2]
				if _, ok := help[name]; ok || name == "help" || name == "socket" || name == "if" || name == "output" || name == "client" || name == "version" || slices.Contains(foreignFlags, "--"+name) {
					continue
				}
				t.Errorf("%s:%d names --%s, which sluice-agent does not have", doc, i+1, name)
			}
		}
	}
}

// TestDocsLogLines: the log lines the docs tell people to grep for are
// ones the agent writes.
func TestDocsLogLines(t *testing.T) {
	src := goSource(t, "daemon", "installer")
	for _, row := range tableRows(t, "docs/operations.md", "### Lines worth grepping for") {
		if !strings.Contains(src, `"`+row[0]) {
			t.Errorf("docs/operations.md tells people to grep for %q; no log message in daemon/ or installer/ starts so", row[0])
		}
	}
	migrate, err := os.ReadFile(filepath.Join(repoRoot, "docs/migrate-from-istio-cni.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(migrate), events.IstioInitMessage) {
		t.Errorf("docs/migrate-from-istio-cni.md does not quote the istio-init warning as the agent logs it: %q", events.IstioInitMessage)
	}
}

// goSource is the non-test Go source under dirs, concatenated.
func goSource(t *testing.T, dirs ...string) string {
	t.Helper()
	var sb strings.Builder
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(repoRoot, d), func(path string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			sb.Write(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return sb.String()
}

// TestDocsMetrics: the metrics table names each metric a running agent
// exports, with its type; ones that need Kubernetes or ztunnel say so and
// exist in the source.
func TestDocsMetrics(t *testing.T) {
	nstest.RequireRoot(t) // the agent's socket and state
	scraped := scrapeAgent(t)
	src := goSource(t, "daemon")
	documented := map[string]bool{}
	for _, row := range tableRows(t, "docs/operations.md", "## Metrics") {
		name, kind := row[0], row[1]
		if !strings.HasPrefix(name, "sluice_") {
			continue
		}
		documented[name] = true
		if got, ok := scraped[name]; ok {
			if got != kind {
				t.Errorf("docs/operations.md: %s is a %s, the agent exports a %s", name, kind, got)
			}
			continue
		}
		what := row[len(row)-1]
		needs := strings.Contains(what, "--kubeconfig") || strings.Contains(what, "--ambient") || strings.Contains(what, "--install")
		if !needs || !strings.Contains(src, `"`+strings.TrimPrefix(name, "sluice_")+`"`) {
			t.Errorf("docs/operations.md documents %s: a standalone agent does not export it, and the row does not say it needs --kubeconfig, --ambient or --install (or the source lacks it)", name)
		}
	}
	for name := range scraped {
		if strings.HasPrefix(name, "sluice_") && !documented[name] {
			t.Errorf("the agent exports %s, which docs/operations.md does not document", name)
		}
	}
}

// scrapeAgent runs a standalone agent on temp dirs (no install, nothing of
// the machine's touched) and returns its metrics' types by name.
func scrapeAgent(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(agentBin, "--socket", filepath.Join(dir, "agent.sock"), "--state-dir", filepath.Join(dir, "state"),
		"--install=false", "--health-addr", "127.0.0.1:0", "--netns-roots", dir)
	cmd.Env = []string{}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`msg=serving .*health_addr=(\S+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var health string
	select {
	case health = <-addr:
	case <-time.After(20 * time.Second):
		t.Fatal("the agent never logged that it serves")
	}
	resp, err := http.Get("http://" + health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	types := map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	return types
}

// TestDocsValuesTable: docs/install.md's values table lists every key of
// values.yaml and only those, and each flag it names is one the agent has
// and the DaemonSet template passes.
func TestDocsValuesTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "templates", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	help := agentFlags(t)
	flag := regexp.MustCompile("`(--[a-z0-9-]+)`")
	covered := map[string]bool{}
	for _, row := range tableRows(t, "docs/install.md", "## Values") {
		key := row[0]
		if _, ok := lookup(values, key); !ok {
			t.Errorf("docs/install.md documents value %s, which values.yaml does not have", key)
		}
		covered[strings.Split(key, ".")[0]] = true
		for _, m := range flag.FindAllStringSubmatch(strings.Join(row[2:], " | "), -1) {
			f := m[1]
			if _, ok := help[strings.TrimPrefix(f, "--")]; !ok {
				t.Errorf("docs/install.md: value %s maps to %s, which sluice-agent does not have", key, f)
			} else if !strings.Contains(string(tmpl), f) {
				t.Errorf("docs/install.md: value %s maps to %s, which the DaemonSet template never passes", key, f)
			}
		}
	}
	for k := range values {
		if !covered[k] {
			t.Errorf("values.yaml has %s, which docs/install.md's values table does not document", k)
		}
	}
}

func lookup(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, p := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}
