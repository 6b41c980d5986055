package main

import (
	"io"
	"log/slog"
	"testing"
)

// cleanup finds the agent's things through the agent's own flags: the
// installer's only when the agent installs.
func TestCleanupConfigFromFlags(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		args    []string
		install bool
	}{
		{[]string{"--install=false"}, false},
		{[]string{"--plugin-binary", "/opt/sluice"}, true},
	} {
		args := append([]string{"--state-dir", "/s", "--socket", "/r/a.sock", "--ztunnel-socket", "/z/z.sock",
			"--netns-roots", "/n1,/n2", "--host-netns", "/h", "--host-proc", "/hp", "--cni-bin-dir", "/b1,/b2"}, tc.args...)
		cfg, err := parseConfig(args, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := cfg.cleanupConfig(log)
		if err != nil {
			t.Fatal(err)
		}
		if cc.StateDir != "/s" || cc.Socket != "/r/a.sock" || cc.ZtunnelSocket != "/z/z.sock" || len(cc.NetnsRoots) != 2 ||
			cc.NetnsRoots[1] != "/n2" || cc.HostNetns != "/h" || cc.HostProc != "/hp" || cc.Log != log {
			t.Errorf("%v: %+v", tc.args, cc)
		}
		if got := cc.Installer != nil; got != tc.install {
			t.Fatalf("%v: installer %v, want %v", tc.args, got, tc.install)
		}
		if tc.install && (len(cc.Installer.BinDirs) != 2 || cc.Installer.PluginBinary != "/opt/sluice") {
			t.Errorf("%v: installer %+v", tc.args, *cc.Installer)
		}
	}
}
