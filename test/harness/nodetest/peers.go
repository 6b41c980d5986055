package nodetest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Nodes are the cluster's nodes, this one (the first, whose link the
// control plane listens on) first. Each has its own NodeName, NodeIP,
// namespaces, NodeRoot, ConfDir, containerd and kubelet; Stop the first
// only, which stops every node.
func (c *Cluster) Nodes() []*Cluster {
	return append([]*Cluster{c}, c.peers...)
}

// addPeers makes the values of the other nodes: each its own /30 to the
// machine, cgroup, dir (inside the first node's) and pod range; the
// control plane's address and credentials are the first node's.
func (c *Cluster) addPeers(opts Options) error {
	taken := []uint16{subnetIndex(c.id)}
	for i := 1; i < opts.Nodes; i++ {
		idx, err := freeSubnet(taken)
		if err != nil {
			return err
		}
		taken = append(taken, idx)
		p := newNode(opts, idx, filepath.Join(c.Dir, "node-"+fmt.Sprintf("%04x", idx)))
		p.apiIP, p.pkiDir, p.podCIDR = c.apiIP, c.pkiDir, fmt.Sprintf("10.244.%d.0/24", i)
		c.peers = append(c.peers, p)
	}
	return nil
}

func subnetIndex(id string) uint16 {
	v, _ := strconv.ParseUint(id, 16, 16)
	return uint16(v)
}

// startPeers brings up each other node as the first one was, with a veth
// to the first node that carries pod traffic between their pod ranges.
func (c *Cluster) startPeers(ctx context.Context, images []string) error {
	for i, p := range c.peers {
		steps := []struct {
			what string
			f    func() error
		}{
			{"create cgroups", p.makeCgroups},
			{"create node namespaces", p.startHolder},
			{"link node", p.link},
			{"link to the first node", func() error { return c.peerLink(i, p) }},
			{"start containerd", func() error { return p.startContainerd(ctx) }},
			{"import images", func() error { return p.importImages(ctx, images) }},
			{"start kubelet", p.startKubelet},
			{"wait for the node", func() error { return p.waitNodeReady(ctx) }},
			{"start kube-proxy", func() error { return p.startKubeProxy(ctx) }},
		}
		for _, s := range steps {
			if err := s.f(); err != nil {
				return fmt.Errorf("node %s: %s: %w", p.NodeName, s.what, err)
			}
		}
	}
	return nil
}

// peerLink joins the first node and peer i with a veth pair in
// 198.19.0.0/16 (only ever inside the nodes' own namespaces) and routes
// each one's pod range to the other: a stand-in for the primary CNI's
// routes between nodes (host-gw routing, as flannel's host-gw or Calico's
// BGP mode lay them). Pod traffic between nodes keeps its addresses.
func (c *Cluster) peerLink(i int, p *Cluster) error {
	first, peer := strconv.Itoa(c.holderPID), strconv.Itoa(p.holderPID)
	mine, theirs := fmt.Sprintf("198.19.%d.1", i), fmt.Sprintf("198.19.%d.2", i)
	dev := "peer" + p.id
	steps := [][]string{
		{"nsenter", "--target", first, "--net", "ip", "link", "add", dev, "type", "veth", "peer", "name", "peer" + c.id, "netns", peer},
		{"nsenter", "--target", first, "--net", "ip", "addr", "add", mine + "/30", "dev", dev},
		{"nsenter", "--target", first, "--net", "ip", "link", "set", dev, "up"},
		{"nsenter", "--target", first, "--net", "ip", "route", "add", p.podCIDR, "via", theirs},
		{"nsenter", "--target", peer, "--net", "ip", "addr", "add", theirs + "/30", "dev", "peer" + c.id},
		{"nsenter", "--target", peer, "--net", "ip", "link", "set", "peer" + c.id, "up"},
		{"nsenter", "--target", peer, "--net", "ip", "route", "add", clusterCIDR, "via", mine},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}
