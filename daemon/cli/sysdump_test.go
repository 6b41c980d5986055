package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// With no agent to ask, sysdump still writes the bundle from the flags
// after --, and a hostile state dir neither hangs it nor gets past its
// caps: a FIFO and a symlink to a secret outside are listed, never read; a
// 1 GiB file is cut at --max-file-size and the archive stays under
// --max-size; a kubeconfig and a SLUICE_…TOKEN in the environment leave
// no trace.
func TestSysdumpWithoutAnAgentSurvivesAHostileStateDir(t *testing.T) {
	base := t.TempDir()
	state, conf, outside := filepath.Join(base, "state"), filepath.Join(base, "net.d"), filepath.Join(base, "outside")
	for _, d := range []string{state, conf, outside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	const fileSecret, tokenSecret, envSecret = "outside-secret-31f2", "kubeconfig-token-77aa", "env-token-5e5e"
	t.Setenv("SLUICE_SYSDUMP_TEST_TOKEN", envSecret)
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(outside, "secret"), fileSecret)
	write(filepath.Join(conf, "10-calico.conflist"), `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"calico"},{"type":"sluice"}]}`)
	write(filepath.Join(conf, "calico-kubeconfig"), "apiVersion: v1\nkind: Config\nusers:\n- name: calico\n  user:\n    token: "+tokenSecret+"\n")
	write(filepath.Join(state, "abc:eth0.json"), `{"containerID":"abc","ifName":"eth0"}`)
	if err := unix.Mkfifo(filepath.Join(state, "fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(state, "link.json")); err != nil {
		t.Fatal(err)
	}
	huge, err := os.Create(filepath.Join(state, "huge.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := huge.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	huge.Close()

	out := filepath.Join(base, "dump.tar.gz")
	var errOut bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- runSysdump([]string{"--socket", filepath.Join(base, "no-agent.sock"), "-o", out,
			"--max-file-size", "64Ki", "--max-size", "1Mi", "--pod-log-dir", filepath.Join(base, "no-logs"),
			"--", "--state-dir", state, "--cni-conf-dir", conf, "--cni-bin-dir", base, "--health-addr", "127.0.0.1:1"},
			os.Getenv, io.Discard, &errOut, testAgentFlags)
	}()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("sysdump exit %d:\n%s", c, errOut.String())
		}
	case <-time.After(time.Minute):
		// Not a timed assertion: a FIFO opened for reading blocks for ever.
		t.Fatal("sysdump hung on the state dir")
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 1<<20 {
		t.Errorf("archive is %d bytes, --max-size 1Mi", len(raw))
	}
	files, stream := readDump(t, raw)
	for _, s := range []string{fileSecret, tokenSecret, envSecret} {
		if bytes.Contains(stream, []byte(s)) {
			t.Errorf("%q is in the archive", s)
		}
	}
	if got := len(files["journal/huge.json"]); got != 64<<10 {
		t.Errorf("journal/huge.json: %d bytes, want the 64Ki cap", got)
	}
	if _, ok := files["journal/abc:eth0.json"]; !ok {
		t.Error("the journal record is not in the archive")
	}
	if !strings.Contains(string(files["cni/conf/10-calico.conflist"]), `"type":"sluice"`) {
		t.Errorf("conflist: %q", files["cni/conf/10-calico.conflist"])
	}
	if !strings.Contains(string(files["agent/env.txt"]), "SLUICE_SYSDUMP_TEST_TOKEN=[redacted]") {
		t.Error("agent/env.txt does not show the token's name, redacted")
	}
	if !strings.Contains(string(files["agent/flags.txt"]), "--state-dir="+state) {
		t.Errorf("agent/flags.txt:\n%s", files["agent/flags.txt"])
	}
	var m struct {
		Notes []string
		Files []struct {
			Name      string
			Truncated bool
			Omitted   string
		}
	}
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatal(err)
	}
	omitted := map[string]string{}
	for _, f := range m.Files {
		if f.Omitted != "" {
			omitted[f.Name] = f.Omitted
		}
		if f.Name == "journal/huge.json" && !f.Truncated {
			t.Error("manifest does not say huge.json was cut")
		}
	}
	for name, why := range map[string]string{"journal/fifo.json": "fifo", "journal/link.json": "symlink", "cni/conf/calico-kubeconfig": "never included"} {
		if !strings.Contains(omitted[name], why) {
			t.Errorf("manifest on %s: %q, want %q", name, omitted[name], why)
		}
	}
	if !strings.Contains(strings.Join(m.Notes, "\n"), "no-agent.sock") {
		t.Errorf("notes do not say the agent was not reachable: %q", m.Notes)
	}
}

func readDump(t *testing.T, raw []byte) (map[string][]byte, []byte) {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(stream))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, stream
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		_, rest, _ := strings.Cut(h.Name, "/")
		files[rest] = data
	}
}

func TestSysdumpRefusesBadSizes(t *testing.T) {
	for _, args := range [][]string{{"--max-size", "0"}, {"--max-file-size", "-1Mi"}, {"--max-size", "12Ti"}, {"--timeout", "0s"}} {
		if code := runSysdump(args, func(string) string { return "" }, io.Discard, io.Discard, testAgentFlags); code != 2 {
			t.Errorf("sysdump %v: exit %d, want 2", args, code)
		}
	}
	var b byteSize
	if err := b.Set("3Mi"); err != nil || b != 3<<20 {
		t.Errorf("3Mi = %d, %v", b, err)
	}
}

// testAgentFlags stands in for the agent's flag set (the agent's main
// package passes its own; TestSysdumpAgentFlagsSayTheirSource there tests
// it): the flags naming where the agent's files are.
func testAgentFlags(args []string, _ func(string) string) (*AgentConfig, []FlagRow, error) {
	c := &AgentConfig{}
	fs := flag.NewFlagSet("sluice-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.StateDir, "state-dir", "/var/lib/sluice", "")
	fs.StringVar(&c.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "")
	bins := fs.String("cni-bin-dir", "/opt/cni/bin", "")
	fs.StringVar(&c.HealthAddr, "health-addr", "127.0.0.1:9890", "")
	err := fs.Parse(args)
	c.CNIBinDirs = strings.Split(*bins, ",")
	var rows []FlagRow
	fs.VisitAll(func(f *flag.Flag) {
		rows = append(rows, FlagRow{Name: f.Name, Value: f.Value.String(), Source: "test"})
	})
	return c, rows, err
}
