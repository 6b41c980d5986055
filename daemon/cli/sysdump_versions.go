package cli

import (
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/sysdump"
	sluicebuild "github.com/sluicemesh/sluice/internal/buildinfo"
)

// binaryInfo is what the dump says of one binary: where, its hash, its
// Go build info.
type binaryInfo struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256,omitempty"`
	Go     string `json:"go,omitempty"`
	Module string `json:"module,omitempty"`
	// Same says the binary is the agent's own plugin, so of its version.
	Same  *bool  `json:"sameAsTheAgentsPlugin,omitempty"`
	Error string `json:"error,omitempty"`
}

func dumpVersions(ctx context.Context, a *sysdump.Archive, ag *agentView) {
	var v versionsView
	v.Sysdump.Version, v.Sysdump.Go = sluicebuild.Version, runtime.Version()
	v.Agent = map[string]any{}
	if ag.pid != 0 {
		v.Agent["pid"] = ag.pid
		exe := binaryOf(fmt.Sprintf("/proc/%d/exe", ag.pid), nil)
		v.Agent["binary"] = exe
	}
	if ag.conn != nil {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := ag.c.debug.Version(cctx, &sluicev1.VersionRequest{})
		cancel()
		if err != nil {
			v.Agent["error"] = ag.c.why(err)
		} else {
			v.Agent["version"], v.Agent["apiVersion"], v.Agent["minApiVersion"] = resp.Version, resp.ApiVersion, resp.MinApiVersion
		}
	}
	own := ownPlugin(ag)
	for _, dir := range ag.cfg.CNIBinDirs {
		v.Plugins = append(v.Plugins, pluginIn(ag.root, dir, own))
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		v.Kernel = map[string]any{"release": unix.ByteSliceToString(u.Release[:]), "version": unix.ByteSliceToString(u.Version[:]),
			"machine": unix.ByteSliceToString(u.Machine[:])}
	}
	addJSON(a, "versions.json", v)
}

// ownPlugin is the plugin the agent installs (--plugin-binary, or sluice
// beside its executable), by hash.
func ownPlugin(ag *agentView) string {
	p := ag.cfg.PluginBinary
	if p == "" && ag.pid != 0 {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", ag.pid))
		if err != nil {
			return ""
		}
		p = filepath.Join(filepath.Dir(exe), "sluice")
	}
	if p == "" {
		return ""
	}
	return pluginIn(ag.root, filepath.Dir(p), "").SHA256
}

func pluginIn(root, dir, own string) binaryInfo {
	d, err := sysdump.OpenDir(root, dir)
	if err != nil {
		return binaryInfo{Path: path.Join(dir, "sluice"), Error: err.Error()}
	}
	defer d.Close()
	f, _, err := d.Open("sluice")
	if err != nil {
		return binaryInfo{Path: path.Join(dir, "sluice"), Error: err.Error()}
	}
	defer f.Close()
	b := binaryOf(path.Join(dir, "sluice"), f)
	if own != "" && b.SHA256 != "" {
		same := own == b.SHA256
		b.Same = &same
	}
	return b
}

// binaryOf hashes a Go binary and reads its build info (no exec).
func binaryOf(p string, f *os.File) binaryInfo {
	b := binaryInfo{Path: p}
	if f == nil {
		var err error
		if f, err = os.Open(p); err != nil {
			b.Error = err.Error()
			return b
		}
		defer f.Close()
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, 1<<30)); err != nil {
		b.Error = err.Error()
		return b
	}
	b.SHA256 = hex.EncodeToString(h.Sum(nil))
	if bi, err := buildinfo.Read(f); err == nil {
		b.Go, b.Module = bi.GoVersion, bi.Main.Path+"@"+bi.Main.Version
	}
	return b
}
