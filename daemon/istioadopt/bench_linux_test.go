package istioadopt_test

import (
	"testing"

	"github.com/sluicemesh/sluice/daemon/istioadopt"
	"github.com/sluicemesh/sluice/test/harness/istiotest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// What the check costs the repairer per pod: a netns with no Istio capture
// (every ordinary uncaptured pod) and one with Istio's iptables-nft rules.
func BenchmarkDetect(b *testing.B) {
	for _, tc := range []struct {
		name  string
		rules []istiotest.Ruleset
	}{
		{"empty", nil},
		{"sidecar-iptables-nft", []istiotest.Ruleset{istiotest.SidecarIptables, istiotest.Sidecar6Iptables}},
		{"ambient-nft", []istiotest.Ruleset{istiotest.AmbientNft}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ns := nstest.New(b, "pod")
			for _, r := range tc.rules {
				istiotest.Program(b, ns, r)
			}
			h := ns.Handle(b)
			for b.Loop() {
				if _, err := istioadopt.Detect(h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
