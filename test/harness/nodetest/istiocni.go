package nodetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sluicemesh/sluice/internal/ociimage"
)

// IstioCNIRepo is the repository of the istio-cni image built from the
// Istio module test/istio pins; its tag is that module version.
const IstioCNIRepo = "localhost/istio-install-cni"

// IstioCNIImage builds istio-cni's node agent (install-cni) and plugin
// (istio-cni) with hack/istiod/build.sh (cached by Istio version) and
// packs them the way Istio's Dockerfile.install-cni lays them out: the
// agent on PATH, the plugin in /opt/cni/bin, which install-cni copies to
// the node. It has no iptables (Istio's base image has): the plugin
// programs pods from the node, with the node's, and test/peer runs the
// repair controller in its delete mode, which programs nothing. It writes
// the OCI archive into dir and returns the image ref and the archive.
func IstioCNIImage(ctx context.Context, dir string) (ref, archive string, err error) {
	bins, err := istioBinaries(ctx, "cni/cmd/install-cni", "cni/cmd/istio-cni")
	if err != nil {
		return "", "", err
	}
	img, err := ociimage.Build([]ociimage.File{
		{Path: "/usr/local/bin/install-cni", Content: bins["install-cni"]},
		{Path: "/opt/cni/bin/istio-cni", Content: bins["istio-cni"]},
	}, ociimage.Config{Entrypoint: []string{"/usr/local/bin/install-cni"}})
	if err != nil {
		return "", "", fmt.Errorf("pack istio-cni: %w", err)
	}
	ref = IstioCNIRepo + ":" + string(bins["version"])
	archive = filepath.Join(dir, "istio-cni.tar")
	if _, err := ociimage.WriteOCI(archive, ref, img); err != nil {
		return "", "", err
	}
	return ref, archive, nil
}

// IstioValidationRepo is the repository of the image whose pilot-agent
// runs istio-validation, the init container istiod's injector adds in CNI
// mode (in Istio's proxyv2 image); its tag is the Istio module version.
const IstioValidationRepo = "localhost/istio-proxyv2"

// IstioValidationImage packs pilot-agent from the pinned Istio module as
// the proxyv2 image's entrypoint, for the real istio-validation check, and
// returns its ref and archive in dir.
func IstioValidationImage(ctx context.Context, dir string) (ref, archive string, err error) {
	bins, err := istioBinaries(ctx, "pilot/cmd/pilot-agent")
	if err != nil {
		return "", "", err
	}
	img, err := ociimage.Build([]ociimage.File{{Path: "/usr/local/bin/pilot-agent", Content: bins["pilot-agent"]}},
		ociimage.Config{Entrypoint: []string{"/usr/local/bin/pilot-agent"}})
	if err != nil {
		return "", "", fmt.Errorf("pack pilot-agent: %w", err)
	}
	ref = IstioValidationRepo + ":" + string(bins["version"])
	archive = filepath.Join(dir, "istio-proxyv2.tar")
	if _, err := ociimage.WriteOCI(archive, ref, img); err != nil {
		return "", "", err
	}
	return ref, archive, nil
}

// istioBinaries builds pkgs (below istio.io/istio) from the Istio module
// test/istio pins with hack/istiod/build.sh, cached by version, and
// returns each binary's bytes by its name, and the Istio version under
// "version".
func istioBinaries(ctx context.Context, pkgs ...string) (map[string][]byte, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	bins := map[string][]byte{}
	for _, p := range pkgs {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "istiod", "build.sh"), p)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("build %s from Istio: %w\n%s", p, err, stderr.Bytes())
		}
		path := strings.TrimSpace(string(out))
		if bins[filepath.Base(p)], err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		bins["version"] = []byte(filepath.Base(filepath.Dir(path)))
	}
	return bins, nil
}

// ContainerNetns is the network namespace of a running container, by its
// CRI ID (a pod status's containerID, with or without "containerd://"),
// as the machine sees it: /proc/<its task's PID>/ns/net.
func (c *Cluster) ContainerNetns(ctx context.Context, id string) (string, error) {
	id = strings.TrimPrefix(id, "containerd://")
	out, err := c.ctr(ctx, "-n", "k8s.io", "tasks", "ls").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ctr tasks ls: %w\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == id && f[2] == "RUNNING" {
			if _, err := strconv.Atoi(f[1]); err != nil {
				return "", fmt.Errorf("task %s has PID %q", id, f[1])
			}
			return "/proc/" + f[1] + "/ns/net", nil
		}
	}
	return "", fmt.Errorf("no running task %s", id)
}
