// Package nodetest runs a hermetic Kubernetes for tests: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler on the
// machine, and a node (containerd, kubelet, kube-proxy, the reference
// bridge CNI) in its own network and mount namespaces and its own cgroups,
// linked to the machine by a veth /30. Everything is built from the Go
// module proxy (hack/kube/build.sh and hack/containerd/build.sh, cached by
// version) or comes from Debian; images are loaded with `ctr images
// import`, never pulled. The node runs containerd 2.x and a primary
// conflist at cniVersion 1.1.0 unless Options say otherwise, so the
// runtime calls CNI STATUS as current clusters' do.
//
// One node by default; Options.Nodes adds more, each in its own
// namespaces and cgroups with its own containerd, kubelet, kube-proxy and
// pod range (10.244.i.0/24), linked to the machine as the first is and to
// the first node by a veth that carries pod traffic between them.
//
// The machine's own network, /etc/cni, /opt/cni, /var/lib/kubelet and
// /var/run/netns are never touched: the node sees its own directories at
// those paths. Stop proves nothing is left: no process, mount, cgroup,
// namespace or link.
//
// Start one Cluster per test binary (TestMain) and give each test its own
// namespace.
//
// Daemons join the node with nsenter and a cgroup join; its CNI, kubelet
// and log dirs are the cluster dir's, bind-mounted; /run is a private
// tmpfs; the kubelet's /proc/sys writes land on files bound over those
// entries. The node gets a /30 of 198.18.0.0/16 (more nodes a veth to the
// first in 198.19.0.0/16), registers with the startup taint, and its
// kubelet is a real node identity (Node authorizer, NodeRestriction).
// containerd 2.x runs NRI on with no validator, so trigger=nri can be
// measured on the same node. Reboot empties the node's /run and restarts
// containerd and the kubelet with their first configs. Eventually polls
// every 100 ms and fails with the last error seen.
package nodetest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Cluster is one running control plane and node.
type Cluster struct {
	Dir      string // everything on disk: certs, configs, logs, the node's own dirs
	NodeName string
	HostIP   string // the control plane's end of the link
	NodeIP   string // the node's end, its InternalIP

	id            string
	hostLink      string
	cgroup        string // the node's cgroup root, in every hierarchy
	hierarchies   []string
	bins          string // the Kubernetes binaries
	plugins       string // the reference CNI plugins
	containerdBin string // containerd, its runc shim and ctr
	cniVersion    string // the primary conflist's
	taints        []corev1.Taint
	tokens        map[string]string
	nsInodes      map[string]uint64 // the node's net and mnt namespaces
	nsFiles       []*os.File        // open on them until teardown's proof is done

	holder             *process // holds the node's namespaces open
	holderPID          int
	etcd, containerd   *process
	kubelet, kubeProxy *process
	control            []*process // apiserver, controller-manager, scheduler
	apiIP              string     // the API server's address (HostIP of the first node)
	pkiDir             string     // certificates, tokens and kubeconfigs (the first node's)
	podCIDR            string     // this node's pod range
	peers              []*Cluster // the other nodes, on the first node's value only
	procs              []*process // everything, in start order
	stopOnce           sync.Once
	stopErr            error
}

// Options say where the cluster's binaries are.
type Options struct {
	KubeBinDir string   // kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
	CNIBinDir  string   // bridge, host-local, loopback
	Images     []string // archives to import into the node's containerd
	// ContainerdBinDir holds containerd, containerd-shim-runc-v2 and ctr;
	// "" is the containerd 2.x of ContainerdBinaries, as clusters run
	// today. SystemContainerd is the machine's (1.x).
	ContainerdBinDir string
	// CNIVersion is the primary conflist's cniVersion; "" is
	// DefaultCNIVersion.
	CNIVersion string
	// RegisterWithTaints are the taints the kubelet registers the node
	// with (a startup taint, as node pools set).
	RegisterWithTaints []corev1.Taint
	// Nodes is how many nodes the cluster has; 0 is 1. Each has its own
	// namespaces, cgroups, containerd, kubelet, kube-proxy and pod range;
	// Nodes() lists them, the Cluster itself first.
	Nodes int
}

// Start brings the cluster up and returns once the node is Ready, kube-proxy
// has synced and the controllers serve. On error everything started is
// stopped again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.ContainerdBinDir == "" {
		dir, err := ContainerdBinaries(ctx)
		if err != nil {
			return nil, err
		}
		opts.ContainerdBinDir = dir
	}
	if opts.CNIVersion == "" {
		opts.CNIVersion = DefaultCNIVersion
	}
	c, err := newCluster(opts)
	if err != nil {
		return nil, err
	}
	if err := c.addPeers(opts); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	if err := c.start(ctx, opts); err != nil {
		if stopErr := c.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, err
	}
	return c, nil
}

func newCluster(opts Options) (*Cluster, error) {
	idx, err := freeSubnet(nil)
	if err != nil {
		return nil, err
	}
	id := fmt.Sprintf("%04x", idx)
	dir, err := os.MkdirTemp("", "sluice-node-"+id+"-")
	if err != nil {
		return nil, fmt.Errorf("create cluster dir: %w", err)
	}
	c := newNode(opts, idx, dir)
	c.apiIP, c.pkiDir, c.podCIDR = c.HostIP, c.path("pki"), podCIDR
	return c, nil
}

// newNode is one node's value: its name, link addresses, cgroup and dir.
func newNode(opts Options, idx uint16, dir string) *Cluster {
	id := fmt.Sprintf("%04x", idx)
	base := 198<<24 | 18<<16 | uint32(idx)*4
	return &Cluster{
		Dir:           dir,
		NodeName:      "node-" + id,
		HostIP:        ipv4(base + 1),
		NodeIP:        ipv4(base + 2),
		id:            id,
		hostLink:      "snode" + id,
		cgroup:        cgroupPrefix + id + "-" + strconv.Itoa(os.Getpid()),
		bins:          opts.KubeBinDir,
		plugins:       opts.CNIBinDir,
		containerdBin: opts.ContainerdBinDir,
		cniVersion:    opts.CNIVersion,
		taints:        opts.RegisterWithTaints,
		tokens:        map[string]string{},
		nsInodes:      map[string]uint64{},
	}
}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	reapOrphans()
	ctx, cancel := context.WithTimeout(ctx, time.Duration(3+2*len(c.peers))*time.Minute)
	defer cancel()
	steps := []struct {
		what string
		f    func() error
	}{
		{"write PKI", c.writePKI},
		{"write tokens", c.writeTokens},
		{"create cgroups", c.makeCgroups},
		{"create node namespaces", c.startHolder},
		{"link node", c.link},
		{"start etcd", func() error { return c.startEtcd(ctx) }},
		{"start kube-apiserver", func() error { return c.startAPIServer(ctx) }},
		{"start kube-controller-manager", c.startControllerManager},
		{"start kube-scheduler", func() error { return c.startScheduler(ctx) }},
		{"start containerd", func() error { return c.startContainerd(ctx) }},
		{"import images", func() error { return c.importImages(ctx, opts.Images) }},
		{"start kubelet", c.startKubelet},
		{"wait for the node", func() error { return c.waitNodeReady(ctx) }},
		{"start kube-proxy", func() error { return c.startKubeProxy(ctx) }},
		{"wait for the controllers", func() error { return c.waitControllers(ctx) }},
		{"start the other nodes", func() error { return c.startPeers(ctx, opts.Images) }},
	}
	for _, s := range steps {
		if err := s.f(); err != nil {
			return fmt.Errorf("node cluster %s: %s: %w", c.id, s.what, err)
		}
	}
	return nil
}

func (c *Cluster) importImages(ctx context.Context, archives []string) error {
	for _, a := range archives {
		if err := c.ImportImage(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.Dir}, elem...)...)
}

func (c *Cluster) bin(name string) string {
	return filepath.Join(c.bins, name)
}

// Kubeconfig is the admin's kubeconfig (group system:masters).
func (c *Cluster) Kubeconfig() string {
	return c.kubeconfig("admin")
}

// freeSubnet picks a /30 in 198.18.0.0/16 (RFC 2544's benchmarking range,
// routed nowhere) that no interface of the machine has an address in.
func freeSubnet(taken []uint16) (uint16, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return 0, fmt.Errorf("list addresses: %w", err)
	}
	used := map[uint16]bool{}
	for _, t := range taken {
		used[t] = true
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip4 := ipn.IP.To4(); ip4 != nil && ip4[0] == 198 && ip4[1] == 18 {
				used[uint16(ip4[2])<<6|uint16(ip4[3])>>2] = true
			}
		}
	}
	for range 100 {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		idx := binary.BigEndian.Uint16(b[:]) >> 2 // 0..16383: /30s in a /16
		if !used[idx] {
			return idx, nil
		}
	}
	return 0, errors.New("no free /30 in 198.18.0.0/16")
}

func ipv4(v uint32) string {
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).String()
}
