package peer

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	corev1 "k8s.io/api/core/v1"
)

// The Istio metadata istiod's injector writes in CNI mode, and a
// destination nothing on the node routes (nodetest's).
const (
	annStatus   = nodetest.AnnSidecarStatus
	statusVal   = nodetest.SidecarStatus
	proxyUID    = nodetest.ProxyUID
	unreachable = nodetest.Unreachable
)

// plainPod is an uninjected application pod (nodetest's PlainPod).
func plainPod(name, dial string) *corev1.Pod { return images.PlainPod(name, dial) }

// validationArgs are the istio-validation init container's arguments as
// Istio's injection template writes them in CNI mode, with its defaults:
// pilot-agent checks that a connection is redirected, and fails the pod
// (exit 126) if not, without applying any rule.
var validationArgs = []string{"istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337", "-m", "REDIRECT",
	"-i", "*", "-x", "", "-b", "*", "-d", "15090,15021,15020", "--log_output_level=default:info",
	"--run-validation", "--skip-rule-apply"}

// sidecarPod is nodetest's SidecarPod with the real istio-validation init
// container (pilot-agent from the proxyv2 stand-in).
func sidecarPod(name, dial string) *corev1.Pod {
	p := images.SidecarPod(name, dial)
	v := &p.Spec.InitContainers[0]
	v.Image, v.Command, v.Args = validationImage, nil, validationArgs
	return p
}

// podRules is what iptables (nf_tables backend, as istio-cni's plugin
// picks on a node whose iptables is nft) and legacy iptables list in the
// nat table of the pod's netns, read through its app container's task.
func podRules(t testing.TB, p *corev1.Pod) string {
	t.Helper()
	var id string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "app" {
			id = cs.ContainerID
		}
	}
	if id == "" {
		t.Fatalf("pod %s/%s has no app container ID: %s", p.Namespace, p.Name, nodetest.PodState(p))
	}
	netns, err := cluster.ContainerNetns(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, save := range []string{"iptables-nft-save", "iptables-legacy-save"} {
		out, err := exec.Command("nsenter", "--net="+netns, save, "-t", "nat").CombinedOutput()
		if err != nil {
			t.Fatalf("%s in %s/%s's netns: %v\n%s", save, p.Namespace, p.Name, err, out)
		}
		fmt.Fprintf(&all, "# %s\n%s", save, out)
	}
	return all.String()
}

// captured is nil if the pod's netns holds Istio's sidecar redirection:
// outbound to 15001, inbound to 15006, the proxy's UID let out.
func captured(rules string) error {
	for _, want := range []string{"-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
		"-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006",
		"--uid-owner 1337 -j RETURN"} {
		if !strings.Contains(rules, want) {
			return fmt.Errorf("no %q in the pod's nat table:\n%s", want, rules)
		}
	}
	return nil
}
