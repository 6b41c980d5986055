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

// A standalone ambient pod is handed to ztunnel with a service account:
// ztunnel matches a local workload by name, namespace and service account,
// and istiod always publishes one, so an empty one fails every connection.
func TestStandaloneGivesZtunnelAServiceAccount(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ambient", "--default-mode", "ambient"}, "default"},
		{[]string{"--ambient", "--default-mode", "ambient", "--standalone-service-account", "shop"}, "shop"},
		{[]string{"--ambient", "--default-mode", "ambient", "--standalone-service-account", ""}, "default"},
	} {
		cfg, err := parseConfig(tc.args, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		pol, err := staticPolicy(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d, err := pol.Decide(context.Background(), policy.Pod{Namespace: "default", Name: "p"})
		if err != nil || !d.Capture || d.ServiceAccount != tc.want {
			t.Errorf("%v: capture %v, service account %q (%v); want %q", tc.args, d.Capture, d.ServiceAccount, err, tc.want)
		}
	}
}
