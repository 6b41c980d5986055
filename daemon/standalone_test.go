package main

import (
	"context"
	"io"
	"testing"

	"github.com/sluicemesh/sluice/daemon/policy"
)

// The standalone agent passes --exclude-namespaces through, as the plugin
// does; other pods get the static mode.
func TestStandaloneHonoursExcludedNamespaces(t *testing.T) {
	cfg, err := parseConfig([]string{"--exclude-namespaces", "kube-system,skip-me"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := staticPolicy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]bool{"skip-me": false, "kube-system": false, "default": true} {
		d, err := pol.Decide(context.Background(), policy.Pod{Namespace: ns, Name: "p"})
		if err != nil || d.Capture != want {
			t.Errorf("namespace %s: capture %v (%v), want %v", ns, d.Capture, err, want)
		}
	}
}
