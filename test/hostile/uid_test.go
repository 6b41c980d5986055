package hostile

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// rssBoundKiB is what the agent may reach (VmHWM, its peak resident set)
// while a refused uid throws half-sent near-limit streams at it.
const rssBoundKiB = 64 << 10

// attackAsNobody loosens the socket (the mistake the uid wall exists for)
// and has uid 65534 open many connections, each with many streams that
// announce a near-1 MiB request and send all of it but the last byte, for 3 s. Every
// connection must be cut at the handshake, counted and logged, and the
// agent's peak RSS stay under rssBoundKiB.
func attackAsNobody(t *testing.T, n *node) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv")
	}
	dir := filepath.Dir(n.Socket)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(n.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(n.Socket, 0o600); os.Chmod(dir, 0o700) })
	pid := n.agent.Cmd.Process.Pid
	base := vmKiB(t, pid, "VmRSS")
	cmd := exec.Command("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
		filepath.Join(binDir, "attacker"), "-socket", n.Socket, "-conns", "8", "-streams", "32", "-send", "1048559", "-for", "3s")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("attacker: %v\n%s", err, out)
	}
	peak := vmKiB(t, pid, "VmHWM")
	t.Logf("attacker: %s; agent RSS %d KiB before, peak %d KiB (bound %d KiB)", strings.TrimSpace(string(out)), base, peak, rssBoundKiB)
	if peak > rssBoundKiB {
		t.Errorf("agent peak RSS %d KiB over the bound %d KiB", peak, rssBoundKiB)
	}
	_, metrics := n.get("/metrics")
	if v := metric(metrics, "sluice_rpc_refused_connections_total"); v < 1 {
		t.Errorf("sluice_rpc_refused_connections_total = %v", v)
	}
	if n.agent.Logs.Count("refused a connection on the agent socket") == 0 {
		t.Error("no refusal logged")
	}
}

func vmKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func metric(text, name string) float64 {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}
