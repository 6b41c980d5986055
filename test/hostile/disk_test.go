package hostile

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// A full state dir is "try again later" naming the full dir (it drains as
// pods go), a read-only one a clear internal error; neither leaves a table
// in the pod, and both heal once the disk does.
func TestStateDirFullOrReadOnly(t *testing.T) {
	n := newNode(t)
	n.smallState = true
	n.start(true)
	victim := nstest.NewIn(t, n.Root, "victim")
	if e, _ := n.run(call{verb: "ADD", id: "victim", netns: victim.Path}); e != nil {
		t.Fatal(e)
	}
	before := ruleset(t, victim)
	pid := strconv.Itoa(n.agent.Cmd.Process.Pid)
	state := filepath.Join("/proc", pid, "root", n.StateDir) // inside the agent's mount namespace

	filler := filepath.Join(state, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	full := nstest.NewIn(t, n.Root, "full")
	e, _ := n.run(call{verb: "ADD", id: "full", netns: full.Path})
	refused(t, e, types.ErrTryAgainLater, "state dir is full")
	if ruleset(t, full) != "" {
		t.Fatal("an ADD that could not journal left a table")
	}
	os.Remove(filler)
	n.stillServes(t, victim, before)

	remount := exec.Command("nsenter", "--mount=/proc/"+pid+"/ns/mnt", "--", "mount", "-o", "remount,ro", n.StateDir)
	if out, err := remount.CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v %s", err, out)
	}
	ro := nstest.NewIn(t, n.Root, "ro")
	e, _ = n.run(call{verb: "ADD", id: "ro", netns: ro.Path})
	refused(t, e, types.ErrInternal, "read-only file system")
	if ruleset(t, ro) != "" {
		t.Fatal("an ADD that could not journal left a table")
	}
	if after := ruleset(t, victim); after != before {
		t.Fatal("the victim's ruleset changed")
	}
	remount = exec.Command("nsenter", "--mount=/proc/"+pid+"/ns/mnt", "--", "mount", "-o", "remount,rw", n.StateDir)
	if out, err := remount.CombinedOutput(); err != nil {
		t.Fatalf("remount rw: %v %s", err, out)
	}
	n.stillServes(t, victim, before)
}
