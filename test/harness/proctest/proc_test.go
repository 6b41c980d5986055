package proctest

import (
	"os/exec"
	"testing"
	"time"
)

// A started process's output lands in Logs, Wait sees it, and Stop ends it
// with SIGTERM and a clean exit.
func TestStartWaitStop(t *testing.T) {
	a := Start(t, exec.Command("sh", "-c", `trap 'echo bye; exit 0' TERM; echo "level=INFO msg=ready one"; echo "msg=ready two"; while :; do sleep 0.05; done`))
	a.Wait(t, 5*time.Second, func() bool { return a.Logs.Count("msg=ready") == 2 }, "no ready lines")
	if got := a.Logs.Lines("level=INFO", "ready"); len(got) != 1 || got[0] != "level=INFO msg=ready one" {
		t.Errorf("Lines(level=INFO, ready) = %q, want the first line only", got)
	}
	a.Stop(t)
	if !a.Exited() || a.Logs.Count("bye") != 1 {
		t.Fatalf("after Stop: exited %v, log %q", a.Exited(), a.Logs)
	}
}
