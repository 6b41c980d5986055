package agenttest

import (
	"context"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// Chain runs a conflist through libcni inside a netns, as a container
// runtime on the node would: the bridge and its routes land in that netns.
type Chain struct {
	NS   *nstest.NS
	Conf *libcni.NetworkConfigList
	Lib  *libcni.CNIConfig
}

// NewChain parses conflist and finds its plugins in binDirs; libcni's
// cache is the test's.
func NewChain(t testing.TB, ns *nstest.NS, conflist []byte, binDirs ...string) *Chain {
	t.Helper()
	conf, err := libcni.ConfListFromBytes(conflist)
	if err != nil {
		t.Fatalf("conflist: %v", err)
	}
	return &Chain{NS: ns, Conf: conf, Lib: libcni.NewCNIConfigWithCacheDir(binDirs, t.TempDir(), nil)}
}

// PodRuntime is the runtime's view of a pod sandbox: its netns, eth0 and
// the Kubernetes CNI_ARGS a kubelet's runtime sends.
func PodRuntime(containerID string, pod *nstest.NS) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: containerID,
		NetNS:       pod.Path,
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"}, // as containerd and CRI-O send
			{"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", pod.Name},
			{"K8S_POD_UID", "uid-" + pod.Name},
		},
	}
}

// Add, Del and Check run the chain's verb for rc.
func (c *Chain) Add(rc *libcni.RuntimeConf) (types.Result, error) {
	return c.AddContext(context.Background(), rc)
}

// AddContext is Add with the runtime's ctx: libcni passes the trace
// context ctx carries to each plugin as TRACEPARENT and TRACESTATE.
func (c *Chain) AddContext(ctx context.Context, rc *libcni.RuntimeConf) (types.Result, error) {
	var res types.Result
	err := c.NS.Do(func() error {
		var err error
		res, err = c.Lib.AddNetworkList(ctx, c.Conf, rc)
		return err
	})
	return res, err
}

func (c *Chain) Del(rc *libcni.RuntimeConf) error {
	return c.NS.Do(func() error { return c.Lib.DelNetworkList(context.Background(), c.Conf, rc) })
}

func (c *Chain) Check(rc *libcni.RuntimeConf) error {
	return c.NS.Do(func() error { return c.Lib.CheckNetworkList(context.Background(), c.Conf, rc) })
}
