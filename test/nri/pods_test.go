package nri_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/origdst"
	"github.com/sluicemesh/sluice/test/harness/containerdtest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// podConfig writes a crictl pod config for namespace/name with a uid made
// from them and returns its path.
func (c *containerd) podConfig(namespace, name string, annotations map[string]string) string {
	t := c.n.t
	t.Helper()
	ann, _ := json.Marshal(annotations)
	conf := fmt.Sprintf(`{
  "metadata": {"name": %[1]q, "namespace": %[2]q, "uid": "uid-%[2]s-%[1]s", "attempt": 0},
  "hostname": %[1]q,
  "annotations": %[4]s,
  "linux": {"cgroup_parent": %[3]q, "security_context": {"namespace_options": {"network": 0}}}
}`, name, namespace, c.n.Cgroup, ann)
	path := filepath.Join(c.n.Dir, namespace+"-"+name+".json")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// sandbox is what inspectp says of a running pod sandbox.
type sandbox = containerdtest.Sandbox

// runPod runs a sandbox and returns it.
func (c *containerd) runPod(namespace, name string) sandbox {
	c.n.t.Helper()
	return c.Inspect(c.MustCrictl("runp", c.podConfig(namespace, name, nil)))
}

// netns is the sandbox's network namespace as the test sees it.
func (n *node) netns(s sandbox) *nstest.NS {
	return &nstest.NS{Name: s.ID[:12], Path: n.Path(s.Netns)}
}

// expectCaptured proves with real TCP that a connection from the pod to a
// service address lands on the sidecar's outbound port with its original
// destination.
func expectCaptured(t *testing.T, pod *nstest.NS) {
	t.Helper()
	var l net.Listener
	if err := pod.Do(func() error {
		var err error
		l, err = net.Listen("tcp4", "0.0.0.0:15001")
		return err
	}); err != nil {
		t.Fatalf("listen on 15001 in the pod: %v", err)
	}
	defer l.Close()
	got := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		dst, err := origdst.Get(c.(*net.TCPConn))
		if err != nil {
			got <- "original destination: " + err.Error()
			return
		}
		fmt.Fprintln(c, "proxied")
		got <- dst.String()
	}()
	conn, err := pod.Dial("tcp4", "10.96.0.10:80", 5*time.Second)
	if err != nil {
		t.Fatalf("connect from the pod to 10.96.0.10:80: %v (not captured?)", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || line != "proxied\n" {
		t.Fatalf("reply from the pod's 10.96.0.10:80: %q %v", line, err)
	}
	if dst := <-got; dst != "10.96.0.10:80" {
		t.Fatalf("the proxy saw original destination %s, want 10.96.0.10:80", dst)
	}
}
