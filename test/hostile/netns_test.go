package hostile

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// journaledNetns is the netns path the agent's journal holds for id's eth0,
// "" when it holds no record.
func (n *node) journaledNetns(id string) string {
	b, err := os.ReadFile(filepath.Join(n.StateDir, id+":eth0.json"))
	if err != nil {
		return ""
	}
	var r struct {
		Netns string `json:"netns"`
	}
	if json.Unmarshal(b, &r) != nil {
		return ""
	}
	return r.Netns
}

// A pod enrolled by /proc/<pid>/ns/net whose process exits while another
// process keeps the netns: the reconciler follows the netns (the journal
// names the live process) and the table stays, instead of forgetting a
// pod whose redirect then nobody owns. Once the last holder exits, the
// record goes.
func TestProcEnrolmentOutlivesItsProcess(t *testing.T) {
	n := newNode(t)
	n.start(true, "--netns-roots", n.Root+",/proc", "--resync-interval", "1s")
	victim := nstest.NewIn(t, n.Root, "victim")
	if e, _ := n.run(call{verb: "ADD", id: "victim", netns: victim.Path}); e != nil {
		t.Fatal(e)
	}
	before := ruleset(t, victim)

	pod := nstest.NewIn(t, n.Root, "procpod")
	first, second := proctest.InNetns(t, pod.Path), proctest.InNetns(t, pod.Path)
	if e, _ := n.run(call{verb: "ADD", id: "procpod", netns: first.Netns()}); e != nil {
		t.Fatal(e)
	}
	if err := unix.Unmount(pod.Path, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	first.Kill() // the path the runtime gave is gone; the netns is not
	nstest.Eventually(t, 10*time.Second, func() bool { return n.journaledNetns("procpod") == second.Netns() },
		"the journal never followed the netns to %s (the record was dropped, or kept the dead path)", second.Netns())
	table := exec.Command("nsenter", "--net="+second.Netns(), "--", "nft", "list", "table", "inet", "sluice")
	if out, err := table.CombinedOutput(); err != nil {
		t.Fatalf("the pod's table is gone: %v %s", err, out)
	}

	second.Kill()
	nstest.Eventually(t, 10*time.Second, func() bool { return n.journaledNetns("procpod") == "" },
		"the record of a netns nothing holds was kept")
	n.stillServes(t, victim, before)
}
