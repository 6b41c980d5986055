package installer

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicemesh/sluice/installer/conflist"
)

// readiness records every readiness change an installer reports.
type readiness struct {
	mu      sync.Mutex
	changes []bool
}

func (r *readiness) record(ready bool, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, ready)
}

// droppedSince reports whether readiness went false after change n.
func (r *readiness) droppedSince(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ready := range r.changes[min(n, len(r.changes)):] {
		if !ready {
			return true
		}
	}
	return false
}

func (r *readiness) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.changes)
}

func ready(in *Installer) func() bool {
	return func() bool { ok, _ := in.Ready(); return ok }
}

func notReadyBecause(in *Installer, reason string) func() bool {
	return func() bool {
		ok, why := in.Ready()
		return !ok && strings.Contains(why, reason)
	}
}

// TestRepairsTampering changes what a running chained installer keeps in
// place, one way at a time, and waits for each repair.
func TestRepairsTampering(t *testing.T) {
	e := newEnv(t)
	primary := filepath.Join(e.conf, "10-flannel.conflist")
	original := testdata(t, "10-flannel.conflist")
	writeTestFile(t, primary, original, 0o644)
	ours := ownedConfFor(primary)
	want := mustInsert(t, original)
	binary := filepath.Join(e.bin, conflist.PluginType)
	plugin := readTestFile(t, e.src)

	var r readiness
	cfg := e.config(true)
	cfg.OnChange = r.record
	in := e.newInstaller(t, cfg)
	start(t, in)
	waitFor(t, "initial install", func() bool { return fileIs(ours, want) && fileIs(binary, plugin) })
	waitFor(t, "ready", ready(in))

	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T)
		check  func() bool
	}{
		{"entry removed in place", func(t *testing.T) {
			without, err := conflist.RemoveEntry(readTestFile(t, ours))
			if err != nil {
				t.Fatal(err)
			}
			writeTestFile(t, ours, without, 0o644) // truncate and write, like an editor
		}, func() bool { return fileIs(ours, want) }},
		{"our conflist deleted", func(t *testing.T) {
			if err := os.Remove(ours); err != nil {
				t.Fatal(err)
			}
		}, func() bool { return fileIs(ours, want) }},
		{"entry moved first", func(t *testing.T) {
			moved := bytes.Replace(original, []byte(`"plugins": [`), []byte("\"plugins\": [\n    {\"type\":\"sluice\"},"), 1)
			writeTestFile(t, ours, moved, 0o644)
		}, func() bool { return fileIs(ours, want) }},
		{"binary deleted", func(t *testing.T) {
			if err := os.Remove(binary); err != nil {
				t.Fatal(err)
			}
		}, func() bool { return fileIs(binary, plugin) }},
		{"binary overwritten with garbage", func(t *testing.T) {
			writeTestFile(t, binary, []byte("garbage"), 0o755)
		}, func() bool { return fileIs(binary, plugin) }},
		{"binary replaced by garbage", func(t *testing.T) {
			if err := writeFile(binary, bytes.Repeat([]byte{0xff}, len(plugin)), 0o755); err != nil {
				t.Fatal(err)
			}
		}, func() bool { return fileIs(binary, plugin) }},
		{"bin dir deleted", func(t *testing.T) {
			if err := os.RemoveAll(e.bin); err != nil {
				t.Fatal(err)
			}
		}, func() bool { return fileIs(binary, plugin) }},
		{"binary deleted from the recreated bin dir", func(t *testing.T) {
			if err := os.Remove(binary); err != nil {
				t.Fatal(err)
			}
		}, func() bool { return fileIs(binary, plugin) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restores, changes := in.Stats().Restores, r.count()
			tc.tamper(t)
			waitFor(t, "repair", func() bool { return tc.check() && in.Stats().Restores > restores })
			waitFor(t, "ready again", ready(in))
			if !r.droppedSince(changes) {
				t.Error("readiness never dropped while the repair was pending")
			}
			if last := in.Stats().LastRestore; last.Path == "" || last.What == "" {
				t.Errorf("restore not recorded: %+v", last)
			}
		})
	}
}

// TestRepairsOwnConflist covers non-chained mode, where the installer owns
// the whole file and so restores it even when it is deleted.
func TestRepairsOwnConflist(t *testing.T) {
	e := newEnv(t)
	in := e.newInstaller(t, e.config(false))
	start(t, in)
	own := filepath.Join(e.conf, OwnConfName)
	want, err := conflist.Own(conflist.PluginType, mustEntry(t, testEntryConfig))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "own conflist written", func() bool { return fileIs(own, want) })
	waitFor(t, "ready", ready(in))

	for _, tc := range []struct {
		name   string
		tamper func() error
	}{
		{"file deleted", func() error { return os.Remove(own) }},
		{"file emptied", func() error { return os.WriteFile(own, nil, 0o644) }},
		{"conf dir deleted", func() error { return os.RemoveAll(e.conf) }},
		{"file deleted from the recreated conf dir", func() error { return os.Remove(own) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restores := in.Stats().Restores
			if err := tc.tamper(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "restored", func() bool { return fileIs(own, want) && in.Stats().Restores > restores })
			waitFor(t, "ready", ready(in))
		})
	}
	if v, err := os.ReadFile(own); err != nil || !bytes.Contains(v, []byte(`"cniVersion": "1.1.0"`)) {
		t.Errorf("own conflist is not cniVersion 1.1.0: %s", v)
	}
}

func TestInvalidPrimaryUntouched(t *testing.T) {
	for _, confName := range []string{"10-flannel.conflist", ""} {
		t.Run("ConfName="+confName, func(t *testing.T) {
			e := newEnv(t)
			primary := filepath.Join(e.conf, "10-flannel.conflist")
			broken := []byte(`{"name": "cbr0", "cniVersion": "0.3.1", "plugins": [{"type": "flannel"`)
			writeTestFile(t, primary, broken, 0o644)
			cfg := e.config(true)
			cfg.ConfName = confName
			in := e.newInstaller(t, cfg)
			start(t, in)

			waitFor(t, "not ready, naming the file", notReadyBecause(in, "10-flannel.conflist"))
			in.sync() // one more full pass, to be sure it never writes
			if !fileIs(primary, broken) {
				t.Fatal("invalid primary was modified")
			}

			fixed := testdata(t, "10-flannel.conflist")
			writeTestFile(t, primary, fixed, 0o644)
			waitFor(t, "installed after the fix", func() bool { return chainedFrom(t, primary, fixed) })
			waitFor(t, "ready", ready(in))

			// Breaking it again drops readiness promptly and is left alone.
			writeTestFile(t, primary, broken, 0o644)
			waitFor(t, "not ready", func() bool { return !ready(in)() })
			in.sync()
			if !fileIs(primary, broken) {
				t.Fatal("invalid primary was modified")
			}
		})
	}
}

func TestMissingPrimary(t *testing.T) {
	for _, tc := range []struct{ file, confName, result string }{
		{"10-calico.conflist", "", "10-calico-sluice.conflist"},
		{"10-calico.conflist", "10-calico.conflist", "10-calico-sluice.conflist"},
		{"10-bridge.conf", "", "10-bridge-sluice.conflist"},
		{"10-bridge.conf", "10-bridge.conf", "10-bridge-sluice.conflist"},
	} {
		t.Run(tc.file+"/ConfName="+tc.confName, func(t *testing.T) {
			e := newEnv(t)
			cfg := e.config(true)
			cfg.ConfName = tc.confName
			in := e.newInstaller(t, cfg)
			start(t, in)
			waitFor(t, "not ready, waiting", notReadyBecause(in, "waiting"))

			data := testdata(t, tc.file)
			if err := writeFile(filepath.Join(e.conf, tc.file), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if filepath.Ext(tc.file) != ".conflist" {
				var err error
				if data, err = conflist.FromConf(data); err != nil {
					t.Fatal(err)
				}
			}
			result := filepath.Join(e.conf, tc.result)
			waitFor(t, "installed", func() bool { return fileIs(result, mustInsert(t, data)) })
			waitFor(t, "ready", ready(in))
			if !fileIs(filepath.Join(e.conf, tc.file), testdata(t, tc.file)) {
				t.Error("the primary was changed")
			}

			// A deleted primary is not recreated, and ours stays: new pods
			// fail closed until a primary is back.
			if err := os.Remove(filepath.Join(e.conf, tc.file)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "not ready", func() bool { return !ready(in)() })
			in.sync()
			assertOnly(t, e.conf, tc.result)
		})
	}
}

// TestPrimaryChangeMovesEntry: a config that sorts first appears (a CNI
// migration); our conflist for it is written, and only then the one for
// the old primary goes. Neither primary is edited.
func TestPrimaryChangeMovesEntry(t *testing.T) {
	e := newEnv(t)
	old := filepath.Join(e.conf, "10-flannel.conflist")
	original := testdata(t, "10-flannel.conflist")
	writeTestFile(t, old, original, 0o600)
	in := e.newInstaller(t, e.config(true))
	start(t, in)
	waitFor(t, "installed", func() bool { return chainedFrom(t, old, original) })
	if fi, _ := os.Stat(ownedConfFor(old)); fi.Mode().Perm() != 0o600 {
		t.Errorf("our conflist has mode %v, not the primary's", fi.Mode().Perm())
	}

	cilium := testdata(t, "05-cilium.conflist")
	next := filepath.Join(e.conf, "05-cilium.conflist")
	if err := writeFile(next, cilium, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "chained from the new primary", func() bool {
		return chainedFrom(t, next, cilium) && fileIs(old, original) && !fileExists(ownedConfFor(old))
	})
}

func TestRestoreWarning(t *testing.T) {
	e := newEnv(t)
	in := e.newInstaller(t, e.config(false))
	start(t, in)
	own := filepath.Join(e.conf, OwnConfName)
	waitFor(t, "installed", ready(in))

	const warning = "something keeps changing a file"
	for i := 1; i <= restoreWarnAfter+1; i++ {
		if strings.Contains(e.logs.String(), warning) {
			t.Fatalf("warned after only %d restores", i-1)
		}
		if err := os.Remove(own); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "restored", func() bool { return in.Stats().Restores == uint64(i) && fileExists(own) })
	}
	waitFor(t, "warning logged", func() bool {
		logs := e.logs.String()
		return strings.Contains(logs, warning) && strings.Contains(logs, own) && strings.Contains(logs, "file missing")
	})
}

func TestUninstall(t *testing.T) {
	t.Run("chained", func(t *testing.T) {
		e := newEnv(t)
		primary := filepath.Join(e.conf, "10-calico.conflist")
		original := testdata(t, "10-calico.conflist")
		writeTestFile(t, primary, original, 0o644)
		in := e.newInstaller(t, e.config(true))
		start(t, in)
		waitFor(t, "installed", ready(in))

		if err := in.Uninstall(); err != nil {
			t.Fatal(err)
		}
		assertOnly(t, e.conf, "10-calico.conflist")
		if !fileIs(primary, original) {
			t.Fatalf("after Uninstall the primary is not the original:\n%s", readTestFile(t, primary))
		}
		if !fileExists(filepath.Join(e.bin, conflist.PluginType)) {
			t.Error("Uninstall removed the binary")
		}
		if ok, _ := in.Ready(); ok {
			t.Error("ready after Uninstall")
		}
		in.sync() // a running installer must not put it back
		assertOnly(t, e.conf, "10-calico.conflist")
	})
	t.Run("single-plugin conf", func(t *testing.T) {
		e := newEnv(t)
		conf := testdata(t, "05-cilium.conf")
		writeTestFile(t, filepath.Join(e.conf, "05-cilium.conf"), conf, 0o644)
		in := e.newInstaller(t, e.config(true))
		in.sync()
		if !fileExists(filepath.Join(e.conf, "05-cilium-sluice.conflist")) {
			t.Fatal("not installed")
		}
		if err := in.Uninstall(); err != nil {
			t.Fatal(err)
		}
		assertOnly(t, e.conf, "05-cilium.conf")
		if !fileIs(filepath.Join(e.conf, "05-cilium.conf"), conf) {
			t.Error("the .conf changed")
		}
	})
	t.Run("own conflist", func(t *testing.T) {
		e := newEnv(t)
		other := filepath.Join(e.conf, "10-flannel.conflist")
		original := testdata(t, "10-flannel.conflist")
		writeTestFile(t, other, original, 0o644)
		in := e.newInstaller(t, e.config(false))
		start(t, in)
		waitFor(t, "installed", ready(in))
		if err := in.Uninstall(); err != nil {
			t.Fatal(err)
		}
		if fileExists(filepath.Join(e.conf, OwnConfName)) {
			t.Error("own conflist left")
		}
		if !fileIs(other, original) {
			t.Error("another CNI's config was changed")
		}
		if !fileExists(filepath.Join(e.bin, conflist.PluginType)) {
			t.Error("Uninstall removed the binary")
		}
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	e := newEnv(t)
	for name, mutate := range map[string]func(*Config){
		"no bin dir":        func(c *Config) { c.BinDirs = nil },
		"relative conf dir": func(c *Config) { c.ConfDir = "net.d" },
		"conf name path":    func(c *Config) { c.ConfName = "../x.conflist" },
		"conf name ext":     func(c *Config) { c.ConfName = "10-x.yaml" },
		"conf name ours":    func(c *Config) { c.ConfName = OwnConfName },
		"missing binary":    func(c *Config) { c.PluginBinary = filepath.Join(e.conf, "nope") },
		"type overridden":   func(c *Config) { c.PluginConfig = map[string]any{"type": "bridge"} },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := e.config(true)
			mutate(&cfg)
			if _, err := New(cfg); err == nil {
				t.Fatal("New accepted the config")
			}
		})
	}
}
