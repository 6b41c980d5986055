// Command node runs the test node cluster (test/harness/nodetest) for a person
// until it is told to stop: hack/node-up.sh starts it in the background and
// hack/node-down.sh stops it.
//
//	go run ./hack/node -state DIR
//
// It builds what it needs (the Kubernetes binaries, the reference CNI
// plugins, the sluice, test-app and pause images), starts the cluster,
// writes DIR/kubeconfig and DIR/ready, and on SIGTERM or SIGINT tears the
// cluster down, proving nothing is left, and writes DIR/stopped.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

func main() {
	state := flag.String("state", "", "directory for the kubeconfig and the ready/stopped markers")
	tag := flag.String("tag", "dev", "tag of the sluice image built and loaded into the node")
	legacy := flag.Bool("containerd-1", false, "run the machine's containerd (1.x, no CNI STATUS) and a primary conflist at cniVersion 1.0.0 instead of containerd 2.x and 1.1.0")
	nodes := flag.Int("nodes", 1, "how many nodes, each with its own namespaces, containerd, kubelet and pod range")
	flag.Parse()
	if *state == "" {
		fmt.Fprintln(os.Stderr, "node: -state is required")
		os.Exit(2)
	}
	if err := run(*state, *tag, *legacy, *nodes); err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		_ = os.WriteFile(filepath.Join(*state, "stopped"), []byte(err.Error()+"\n"), 0o644)
		os.Exit(1)
	}
}

func run(state, tag string, legacy bool, nodes int) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	bins, err := nodetest.KubeBinaries(ctx)
	if err != nil {
		return err
	}
	plugins, err := nodetest.CNIPlugins(ctx)
	if err != nil {
		return err
	}
	imgDir := filepath.Join(state, "images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	images, err := nodetest.BuildImages(ctx, imgDir, tag)
	if err != nil {
		return err
	}
	opts := nodetest.Options{KubeBinDir: bins, CNIBinDir: plugins, Images: images.Archives, Nodes: nodes}
	if legacy {
		if opts.ContainerdBinDir, err = nodetest.SystemContainerd(); err != nil {
			return err
		}
		opts.CNIVersion = "1.0.0"
	}
	c, err := nodetest.Start(ctx, opts)
	if err != nil {
		return err
	}
	kc, err := os.ReadFile(c.Kubeconfig())
	if err == nil {
		err = os.WriteFile(filepath.Join(state, "kubeconfig"), kc, 0o600)
	}
	if err != nil {
		_ = c.Stop()
		return err
	}
	info := fmt.Sprintf("node %s (%s), API %s, node dir %s\nimages: %s:%s %s (imagePullPolicy: Never)\n",
		c.NodeName, c.NodeIP, c.Server(), c.Dir, images.SluiceRepo, images.SluiceTag, images.TestApp)
	if err := os.WriteFile(filepath.Join(state, "ready"), []byte(info), 0o644); err != nil {
		_ = c.Stop()
		return err
	}
	<-ctx.Done()
	if err := c.Stop(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(state, "stopped"), []byte("clean: no process, mount, cgroup, namespace or link left\n"), 0o644)
}
