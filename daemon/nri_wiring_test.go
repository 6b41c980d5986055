package main

import (
	"io"
	"strings"
	"testing"
)

func TestTriggerFlags(t *testing.T) {
	c, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.trigger != triggerCNI || c.nriSocket != "/var/run/nri/nri.sock" || !c.installs() {
		t.Fatalf("defaults: trigger %q socket %q installs %v", c.trigger, c.nriSocket, c.installs())
	}
	env := map[string]string{"SLUICE_TRIGGER": "nri", "SLUICE_NRI_SOCKET": "/run/x/nri.sock"}
	c, err = parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.trigger != triggerNRI || c.nriSocket != "/run/x/nri.sock" {
		t.Fatalf("env not applied: trigger %q socket %q", c.trigger, c.nriSocket)
	}
	if c.installs() {
		t.Fatal("--trigger nri must not install a conflist entry")
	}
	c, err = parseConfig([]string{"--trigger", "both"}, func(string) string { return "" }, io.Discard)
	if err != nil || !c.installs() {
		t.Fatalf("--trigger both: err %v, installs %v; want the entry installed", err, c != nil && c.installs())
	}
}

func TestTriggerFlagsRejected(t *testing.T) {
	for _, args := range [][]string{
		{"--trigger", "crio"},
		{"--trigger", "nri", "--nri-socket", "nri.sock"},
	} {
		_, err := parseConfig(args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[len(args)-2], "--")) {
			t.Errorf("%v: err = %v, want one naming %s", args, err, args[len(args)-2])
		}
	}
}
