package nodetest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os/exec"
	"time"
)

// The cluster's fixed addresses. Every cluster has its own host IP, so
// fixed ports never collide between clusters.
const (
	apiPort        = "6443"
	serviceCIDR    = "10.96.0.0/24"
	serviceAPIIP   = "10.96.0.1"
	podCIDR        = "10.244.0.0/24" // the first node's; node i has 10.244.i.0/24
	clusterCIDR    = "10.244.0.0/16"
	clusterDomain  = "cluster.local"
	schedulerPort  = "10259"
	controllerPort = "10257"
)

// Server is the API server's URL.
func (c *Cluster) Server() string {
	return "https://" + c.apiIP + ":" + apiPort
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return fmt.Errorf("find etcd: %w (install Debian's etcd-server package)", err)
	}
	client := "http://" + c.HostIP + ":2379"
	peer := "http://" + c.HostIP + ":2380"
	p, err := start("etcd", c.path("etcd.log"), []string{bin,
		"--name=nodetest",
		"--data-dir=" + c.path("etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=nodetest=" + peer,
		"--snapshot-count=10000",
	})
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.etcd = p
	return waitHTTP(ctx, p, http.DefaultClient, client+"/health", "")
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	pki := c.path("pki") + "/"
	p, err := start("kube-apiserver", c.path("kube-apiserver.log"), []string{c.bin("kube-apiserver"),
		"--etcd-servers=http://" + c.HostIP + ":2379",
		"--bind-address=" + c.HostIP,
		"--advertise-address=" + c.HostIP,
		"--secure-port=" + apiPort,
		"--tls-cert-file=" + pki + "apiserver.crt",
		"--tls-private-key-file=" + pki + "apiserver.key",
		"--client-ca-file=" + pki + "ca.crt",
		"--token-auth-file=" + pki + "tokens.csv",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc." + clusterDomain,
		"--service-account-key-file=" + pki + "sa.key",
		"--service-account-signing-key-file=" + pki + "sa.key",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		// The kubelet is reached by its node IP: nothing resolves names.
		"--kubelet-preferred-address-types=InternalIP",
		// The front-proxy CA: controller-manager and scheduler read it
		// from the API to authenticate requests to their own ports.
		"--requestheader-client-ca-file=" + pki + "front-proxy-ca.crt",
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki + "front-proxy-client.crt",
		"--proxy-client-key-file=" + pki + "front-proxy-client.key",
	})
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.control = append(c.control, p)
	return waitHTTP(ctx, p, insecureClient(), c.Server()+"/readyz", c.adminToken())
}

func (c *Cluster) startControllerManager() error {
	kc := c.kubeconfig("kube-controller-manager")
	p, err := start("kube-controller-manager", c.path("kube-controller-manager.log"), []string{c.bin("kube-controller-manager"),
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=" + c.HostIP,
		"--secure-port=" + controllerPort,
		"--service-account-private-key-file=" + c.path("pki", "sa.key"),
		"--root-ca-file=" + c.path("pki", "ca.crt"),
		"--use-service-account-credentials=true",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--leader-elect=false",
	})
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.control = append(c.control, p)
	return nil
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	kc := c.kubeconfig("kube-scheduler")
	p, err := start("kube-scheduler", c.path("kube-scheduler.log"), []string{c.bin("kube-scheduler"),
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=" + c.HostIP,
		"--secure-port=" + schedulerPort,
		"--leader-elect=false",
	})
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.control = append(c.control, p)
	return waitHTTP(ctx, p, insecureClient(), "https://"+c.HostIP+":"+schedulerPort+"/healthz", "")
}

// waitHTTP polls url until it answers 200, failing early if p exits.
func waitHTTP(ctx context.Context, p *process, client *http.Client, url, token string) error {
	var last error
	for {
		if err := p.Alive(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s at %s: %w (last: %v)\n%s", p.Name, url, ctx.Err(), last, p.LogTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// insecureClient reads health endpoints; what they serve is not secret and
// their certificates are self-signed by the components.
func insecureClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // health probes of the test's own components
	}}
}
