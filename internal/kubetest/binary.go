package kubetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Version is the Kubernetes release the tests run against.
const Version = "v1.37.2"

// apiserverBinary returns the kube-apiserver to run: $SLUICE_KUBE_APISERVER
// when set, else the cached build, built on first use by
// hack/kube-apiserver/build.sh (minutes, once per machine).
func apiserverBinary() (string, error) {
	if p := os.Getenv("SLUICE_KUBE_APISERVER"); p != "" {
		return p, nil
	}
	cache := os.Getenv("SLUICE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("locate kube-apiserver cache: %w", err)
		}
		cache = filepath.Join(home, ".cache", "sluice")
	}
	bin := filepath.Join(cache, "kube", Version, "kube-apiserver")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	script, err := buildScript()
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.Command(script, Version)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build kube-apiserver %s with %s: %w\n%s", Version, script, err, tail(stderr.String(), 40))
	}
	if got := strings.TrimSpace(string(out)); got != bin {
		return "", fmt.Errorf("build kube-apiserver %s: %s printed %q, want %q (SLUICE_CACHE differs?)", Version, script, got, bin)
	}
	return bin, nil
}

// buildScript finds hack/kube-apiserver/build.sh by walking up from the
// test's working directory (the package directory) to the module root.
func buildScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("locate build script: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "hack", "kube-apiserver", "build.sh"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("locate hack/kube-apiserver/build.sh: no go.mod above the working directory; set SLUICE_KUBE_APISERVER")
		}
		dir = parent
	}
}

// tail keeps the last n lines of s: a failed build's cause is at the end.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
