package e2e

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// One ADD, one request id, in both the plugin's and the agent's logs; the
// plugin's warnings reach the agent's log, where operators look.
func TestRequestIDJoinsPluginAndAgentLogs(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	pod := n.Pod("logs")
	cmd := n.NS.Command(filepath.Join(binDir, "sluice"))
	cmd.Env = append([]string{"CNI_PATH=" + binDir}, cniEnv("ADD", "logs1", pod.Path)...)
	cmd.Stdin = bytes.NewReader(pluginStdin(n.Socket, "1.0.0", `,"logLevel":"info","timout":"1s","prevResult":`+fakePrev))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("ADD: %v\n%s\n%s", err, out, stderr.String())
	}
	m := regexp.MustCompile(`request_id=([0-9a-f]{16})`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("plugin logged no request id:\n%s", stderr.String())
	}
	id := m[1]
	if lines := n.agent.Logs.Lines("msg=call", "request_id="+id, "/sluice.v1.CNI/Add", "code=OK"); len(lines) != 1 {
		t.Fatalf("agent log has %d ADD lines with request id %s:\n%s", len(lines), id, n.agent.Logs)
	}
	warn := n.agent.Logs.Lines("plugin warning", "request_id="+id)
	if len(warn) != 1 || !strings.Contains(warn[0], `timout`) {
		t.Fatalf("the plugin's warning did not reach the agent's log: %q", warn)
	}
}
