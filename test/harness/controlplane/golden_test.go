package controlplane_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/controlplane"
)

var update = flag.Bool("update", false, "rewrite testdata/*.nft from what the Node's policy decides")

// TestGoldens holds testdata/*.nft to what policy decides for each kind
// of pod, built by the pure builder: the tier's rows then compare the
// fake kernel's table with them.
func TestGoldens(t *testing.T) {
	n := controlplane.New(t)
	n.Namespace(t, "app", nil)
	n.Namespace(t, "mesh", map[string]string{"istio.io/dataplane-mode": "ambient"})
	pods := map[string]controlplane.Pod{
		controlplane.GoldenSidecar: {Namespace: "app", Name: "web", Injected: true},
		controlplane.GoldenAmbient: {Namespace: "mesh", Name: "web"},
	}
	for _, p := range pods {
		n.Running(t, p)
	}
	n.Start(t)
	for name, p := range pods {
		t.Run(name, func(t *testing.T) {
			d, err := n.Policy.Decide(context.Background(), policy.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID())})
			if err != nil || !d.Capture {
				t.Fatalf("policy for %s: %+v, %v", p.Key(), d, err)
			}
			rs, err := redirect.Build(d.Spec)
			if err != nil {
				t.Fatal(err)
			}
			got := rs.Render()
			if *update {
				if err := os.WriteFile(filepath.Join("testdata", name+".nft"), []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if want := controlplane.Golden(t, name); got != want {
				t.Errorf("testdata/%s.nft differs from what policy decides for %s (run with -update if intended)\ngot:\n%s\nwant:\n%s", name, p.Key(), got, want)
			}
		})
	}
}
