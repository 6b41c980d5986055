package nri_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/agenttest"
)

// node plays the machine for one test (agenttest.Node with PrivateRun):
// its own netns and mount namespace, its own /run (containerd's sockets
// and state, the shims' sockets under /run/containerd/s, the pods' netns
// mounts, the NRI and agent sockets) and a copy-on-write /var/lib
// (libcni's cache), so nothing of the machine's is touched; every process
// of the test runs in it through Command.
type node struct {
	*agenttest.Node
	t testing.TB
	// agentInHostNetns runs the agent in the machine's netns (and the
	// node's mount namespace), to reach the test API server on loopback.
	agentInHostNetns bool
	// capabilities, when set, are the agent's only ones (agenttest.Capped).
	capabilities []string
}

func newNode(t testing.TB) *node {
	t.Helper()
	return &node{Node: agenttest.NewNodeWith(t, agenttest.NodeOptions{PrivateRun: true}), t: t}
}

// conflistEntries is every CNI config of the node, concatenated.
func (n *node) conflistEntries() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(n.ConfDir, "*"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		b.Write(data)
	}
	return b.String()
}
