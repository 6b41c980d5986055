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

	"github.com/sluicemesh/sluice/hack/image"
)

// IstioCNIRepo is the repository of the istio-cni image built from the
// Istio module test/istio pins; its tag is that module version.
const IstioCNIRepo = "localhost/istio-install-cni"

// IstioCNIImage builds istio-cni's node agent (install-cni) and plugin
// (istio-cni) with hack/istio-cni/build.sh (cached by Istio version) and
// packs them the way Istio's Dockerfile.install-cni lays them out: the
// agent on PATH, the plugin in /opt/cni/bin, which install-cni copies to
// the node. It writes the OCI archive into dir and returns the image ref
// and the archive. The image has no iptables: the plugin programs pods
// from the node, where the node's own iptables is.
func IstioCNIImage(ctx context.Context, dir string) (ref, archive string, err error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", "", err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "istio-cni", "build.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("build istio-cni: %w\n%s", err, stderr.Bytes())
	}
	bins := strings.TrimSpace(string(out))
	agent, err := os.ReadFile(filepath.Join(bins, "install-cni"))
	if err != nil {
		return "", "", fmt.Errorf("read install-cni: %w", err)
	}
	plugin, err := os.ReadFile(filepath.Join(bins, "istio-cni"))
	if err != nil {
		return "", "", fmt.Errorf("read istio-cni: %w", err)
	}
	img, err := image.Build([]image.File{
		{Path: "/usr/local/bin/install-cni", Content: agent},
		{Path: "/opt/cni/bin/istio-cni", Content: plugin},
	}, image.Config{Entrypoint: []string{"/usr/local/bin/install-cni"}})
	if err != nil {
		return "", "", fmt.Errorf("pack istio-cni: %w", err)
	}
	ref = IstioCNIRepo + ":" + filepath.Base(bins)
	archive = filepath.Join(dir, "istio-cni.tar")
	if _, err := image.WriteOCI(archive, ref, img); err != nil {
		return "", "", err
	}
	return ref, archive, nil
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
