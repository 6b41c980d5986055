package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// The support bundle from a real agent with two pods enrolled and the
// installer on: every section is there with what it should say, and the
// secrets planted where a node keeps them (a kubeconfig with a token in
// the CNI conf dir, a SLUICE_…TOKEN in the agent's env, a bearer token in
// a stray file of the state dir and in the agent's container log) appear
// nowhere in the archive's bytes.
func TestSysdump(t *testing.T) {
	n := newNode(t)
	secrets := map[string]string{
		"env":        "planted-env-secret-7c1d0e",
		"kubeconfig": "planted-kubeconfig-token-9f3a2b",
		"state":      "planted-state-bearer-4e5f6a",
		"log":        "planted-log-token-8b9c0d",
	}
	kubeconfig := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.96.0.1:443\nusers:\n- name: sluice\n  user:\n    token: " + secrets["kubeconfig"] + "\n"
	writeFile(t, filepath.Join(n.ConfDir, "ZZZ-sluice-kubeconfig"), kubeconfig)
	writeFile(t, filepath.Join(n.ConfDir, "10-bridge.conflist"), string(n.bridgeOnly()))

	cmd := n.NS.Command(filepath.Join(binDir, "sluice-agent"), n.agentArgs("--install=true")...)
	cmd.Env = append(os.Environ(), "SLUICE_E2E_TOKEN="+secrets["env"], "POD_NAME=sluice-agent-e2e", "POD_NAMESPACE=kube-system")
	n.agent = proctest.Start(t, cmd)
	n.agent.Wait(t, 10*time.Second, func() bool {
		resp, err := n.Status()
		return err == nil && resp.Ready
	}, "agent never became ready")
	c := n.cni(n.loopbackChain("2s"))
	for _, id := range []string{"d00d0001aaaa", "d00d0002bbbb"} {
		if _, err := c.Add(rt(id, n.Pod(id))); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(n.StateDir, "notes.txt"), "Authorization: Bearer "+secrets["state"]+"\n")
	// The kubelet's pod log dir, as the runtime keeps the agent's stderr.
	logDir := t.TempDir()
	agentLog := filepath.Join(logDir, "kube-system_sluice-agent-e2e_0c0ffee", "sluice-agent", "0.log")
	writeFile(t, agentLog, n.agent.Logs.String()+"level=INFO msg=\"refreshed\" token="+secrets["log"]+"\n")

	dump := n.NS.Command(filepath.Join(binDir, "sluice-agent"), "sysdump", "--socket", n.Socket, "-o", "-", "--pod-log-dir", logDir)
	dump.Env = append(os.Environ(), "SLUICE_E2E_TOKEN="+secrets["env"])
	var out, errOut bytes.Buffer
	dump.Stdout, dump.Stderr = &out, &errOut
	if err := dump.Run(); err != nil {
		t.Fatalf("sysdump: %v\n%s", err, errOut.String())
	}
	t.Logf("sysdump: %d bytes\n%s", out.Len(), errOut.String())
	files, stream := untar(t, out.Bytes())

	for name, s := range secrets {
		if bytes.Contains(stream, []byte(s)) || bytes.Contains(out.Bytes(), []byte(s)) {
			t.Errorf("the %s secret %q is in the archive", name, s)
		}
	}
	want := map[string][]string{
		"README.txt":                         {"Redacted throughout"},
		"manifest.json":                      {`"cni/conf/ZZZ-sluice-kubeconfig"`, "never included"},
		"versions.json":                      {`"release"`, `"apiVersion"`, `"sameAsTheAgentsPlugin": true`, `"go": "go1.`},
		"agent/status.json":                  {`"ready": true`, `"workloads": 2`},
		"agent/status.txt":                   {"ready"},
		"agent/workloads.json":               {"d00d0001aaaa", "d00d0002bbbb"},
		"agent/workloads.txt":                {"d00d0001aaaa"},
		"agent/flags.txt":                    {"--state-dir=" + n.StateDir, "--install=true", "(command line)", "--allowed-uids=0"},
		"agent/env.txt":                      {"SLUICE_E2E_TOKEN=[redacted]", "POD_NAME=sluice-agent-e2e"},
		"health/healthz.txt":                 {"HTTP 200"},
		"health/readyz.txt":                  {"HTTP 200"},
		"health/metrics.txt":                 {"sluice_build_info", "sluice_workloads_enrolled"},
		"cni/conf.txt":                       {"10-bridge.conflist", "10-bridge-sluice.conflist", "ZZZ-sluice-kubeconfig"},
		"cni/conf/10-bridge-sluice.conflist": {`"type": "sluice"`},
		"installer.txt":                      {"10-bridge-sluice.conflist: the sluice entry", filepath.Join(n.CNIBin, "sluice") + ": sha256"},
		"journal.txt":                        {"d00d0001aaaa:eth0.json", ".sluice-state", "notes.txt"},
		"journal/d00d0001aaaa:eth0.json":     {"d00d0001aaaa"},
		"journal/notes.txt":                  {"Authorization: [redacted]"},
		"logs/sluice-agent/0.log":            {"token=[redacted]", "msg="},
	}
	for name, words := range want {
		data, ok := files[name]
		if !ok {
			t.Errorf("%s is not in the archive", name)
			continue
		}
		for _, w := range words {
			if !strings.Contains(string(data), w) {
				t.Errorf("%s does not say %q:\n%s", name, w, data)
			}
		}
	}
	if _, ok := files["cni/conf/ZZZ-sluice-kubeconfig"]; ok {
		t.Error("the kubeconfig is in the archive")
	}
	for name, data := range files {
		// What the journal and the rulesets hold is no secret: nothing in
		// them may be lost to redaction.
		if (strings.HasPrefix(name, "journal/d00d") || strings.HasPrefix(name, "agent/rulesets/")) && strings.Contains(string(data), "[redacted]") {
			t.Errorf("%s was redacted:\n%s", name, data)
		}
	}
	rulesets := 0
	for name, data := range files {
		if strings.HasPrefix(name, "agent/rulesets/") && strings.HasSuffix(name, ".nft") {
			rulesets++
			if !strings.Contains(string(data), "table inet sluice") || !strings.Contains(string(data), "# kernel: in sync") {
				t.Errorf("%s:\n%s", name, data)
			}
		}
	}
	if rulesets != 2 {
		t.Errorf("%d rulesets in agent/rulesets, want 2", rulesets)
	}
	var m struct {
		Notes []string `json:"notes"`
	}
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Notes) != 0 {
		t.Errorf("a healthy agent's dump has notes: %q", m.Notes)
	}
}

// untar returns the archive's files by their name under its one top
// directory, and the whole uncompressed stream.
func untar(t *testing.T, b []byte) (map[string][]byte, []byte) {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(stream))
	files := map[string][]byte{}
	top := ""
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, stream
		}
		if err != nil {
			t.Fatal(err)
		}
		dir, rest, _ := strings.Cut(h.Name, "/")
		if top == "" {
			top = dir
		}
		if dir != top || !strings.HasPrefix(top, "sluice-sysdump-") || path.Clean(h.Name) != h.Name || h.Typeflag != tar.TypeReg {
			t.Errorf("archive entry %q (type %c) under %q", h.Name, h.Typeflag, top)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[rest] = data
	}
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
