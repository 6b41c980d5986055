package nodetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ca is a self-signed certificate authority of one cluster.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(cn string) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate %s key: %w", cn, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", cn, err)
	}
	return &ca{cert: cert, key: key}, nil
}

// issue writes a certificate signed by c, and its key, to dir/name.crt and
// dir/name.key.
func (c *ca) issue(dir, name, cn string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate %s key: %w", name, err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return fmt.Errorf("sign %s: %w", name, err)
	}
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func (c *ca) write(path string) error {
	return writePEM(path, "CERTIFICATE", c.cert.Raw)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writePKI writes everything the control plane serves and signs with:
// the cluster CA and the API server's serving certificate (valid for the
// in-cluster Service IP too, which pods verify), the front-proxy CA and its
// client certificate, and the service account signing key.
func (c *Cluster) writePKI() error {
	dir := c.path("pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	root, err := newCA("nodetest-ca")
	if err != nil {
		return err
	}
	if err := root.write(filepath.Join(dir, "ca.crt")); err != nil {
		return err
	}
	dns := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}
	ips := []net.IP{net.ParseIP(c.HostIP), net.ParseIP(serviceAPIIP), net.ParseIP("127.0.0.1")}
	if err := root.issue(dir, "apiserver", "kube-apiserver", x509.ExtKeyUsageServerAuth, dns, ips); err != nil {
		return err
	}
	front, err := newCA("nodetest-front-proxy-ca")
	if err != nil {
		return err
	}
	if err := front.write(filepath.Join(dir, "front-proxy-ca.crt")); err != nil {
		return err
	}
	if err := front.issue(dir, "front-proxy-client", "front-proxy-client", x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate service account key: %w", err)
	}
	return writeKey(filepath.Join(dir, "sa.key"), sa)
}

// identity is one token user of the cluster.
type identity struct {
	user   string
	groups []string
	token  string
}

// identities are the users the components and the tests connect as. The
// kubelet is a real node identity (Node authorizer, NodeRestriction); the
// other components are cluster admins, which spares this harness their
// per-controller credentials and tests nothing of sluice's.
func (c *Cluster) identities() []identity {
	ids := []identity{
		{user: "admin", groups: []string{"system:masters"}},
		{user: "system:kube-controller-manager", groups: []string{"system:masters"}},
		{user: "system:kube-scheduler", groups: []string{"system:masters"}},
		{user: "system:kube-proxy", groups: []string{"system:masters"}},
	}
	for _, n := range c.Nodes() {
		ids = append(ids, identity{user: "system:node:" + n.NodeName, groups: []string{"system:nodes"}})
	}
	return ids
}

// writeTokens writes the API server's token file and one kubeconfig per
// identity, named after the user's last word (admin, kube-scheduler, ...).
func (c *Cluster) writeTokens() error {
	var csv strings.Builder
	for _, id := range c.identities() {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		id.token = hex.EncodeToString(b)
		c.tokens[id.user] = id.token
		fmt.Fprintf(&csv, "%s,%s,%s,\"%s\"\n", id.token, id.user, id.user, strings.Join(id.groups, ","))
		if err := c.writeKubeconfig(kubeconfigName(id.user), id.token); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(c.pkiDir, "tokens.csv"), []byte(csv.String()), 0o600)
}

func (c *Cluster) adminToken() string {
	return c.tokens["admin"]
}

func kubeconfigName(user string) string {
	if node, ok := strings.CutPrefix(user, "system:node:"); ok {
		return "kubelet-" + node
	}
	return strings.TrimPrefix(user, "system:")
}

const kubeconfigTemplate = `apiVersion: v1
kind: Config
clusters:
- name: nodetest
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: user
  user:
    token: %s
contexts:
- name: nodetest
  context: {cluster: nodetest, user: user}
current-context: nodetest
`

func (c *Cluster) writeKubeconfig(name, token string) error {
	body := fmt.Sprintf(kubeconfigTemplate, c.Server(), filepath.Join(c.pkiDir, "ca.crt"), token)
	return os.WriteFile(c.kubeconfig(name), []byte(body), 0o600)
}

func (c *Cluster) kubeconfig(name string) string {
	return filepath.Join(c.pkiDir, name+".kubeconfig")
}
