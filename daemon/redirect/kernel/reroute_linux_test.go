package kernel

import (
	"fmt"
	"net"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/vishvananda/netlink"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// withVM adds a KubeVirt-style guest behind the pod: a netns on a veth
// whose pod end is k6t-eth0, routed through the pod. The guest's own
// outbound connections enter the pod on that interface.
func withVM(t *testing.T, tp *topology) *nstest.NS {
	t.Helper()
	vm := nstest.New(t, "vm")
	nstest.Veth(t, tp.pod, "k6t-eth0", []string{"10.251.0.1/24"}, vm, "eth0", []string{"10.251.0.2/24"})
	if err := vm.Do(func() error {
		if err := netlink.RouteAdd(&netlink.Route{Gw: net.ParseIP("10.251.0.1")}); err != nil {
			return fmt.Errorf("default route via the pod: %w", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return vm
}

// TestRerouteInterfaces: TCP from a reroute interface is the guest's
// outbound traffic and goes to the outbound listener with its original
// destination, in every mode; without the option it would be taken as
// inbound.
func TestRerouteInterfaces(t *testing.T) {
	tproxy := redirect.DefaultSpec()
	tproxy.Interception = redirect.InterceptTProxy
	for _, tc := range []struct {
		name     string
		spec     redirect.Spec
		topology func(*testing.T) *topology
		out      string
	}{
		{"sidecar", redirect.DefaultSpec(), newTopology, "proxy-out 10.96.0.10:80"},
		{"tproxy", tproxy, newTopology, "proxy-out 10.96.0.10:80"},
		{"ambient", redirect.DefaultAmbientSpec(), newAmbientTopology, "ztunnel-out 10.96.0.10:80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := tc.topology(t)
			vm := withVM(t, tp)
			s := tc.spec
			mustApply(t, tp, s)
			// The control: without the option the guest's call is inbound.
			if got, err := tryDial(vm, "tcp", "10.96.0.10:80"); err == nil && got == tc.out {
				t.Errorf("without RerouteInterfaces: %q, want it not taken as outbound", got)
			}
			s.RerouteInterfaces = []string{"k6t-eth0"}
			mustApply(t, tp, s)
			expect(t, "guest outbound", dialFrom(t, vm, "tcp", "10.96.0.10:80"), tc.out)
			expect(t, "pod outbound", dialFrom(t, tp.pod, "tcp", "10.96.0.10:80"), tc.out)
		})
	}
}
