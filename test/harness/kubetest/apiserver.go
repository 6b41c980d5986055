package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
)

// startAPIServer runs kube-apiserver with the Env's files. Only the flags a
// test environment needs differ from the defaults; each says why.
func (e *Env) startAPIServer() (*process, error) {
	saKey := filepath.Join(e.dir, "sa.key")
	args, err := e.auditArgs()
	if err != nil {
		return nil, err
	}
	return startProcess("kube-apiserver", filepath.Join(e.dir, "kube-apiserver.log"), e.bin, append(args,
		"--etcd-servers="+e.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(e.port),
		// Self-signed serving certificates are generated here once and
		// reused by a restart; clients skip verification.
		"--cert-dir="+filepath.Join(e.dir, "certs"),
		"--token-auth-file="+filepath.Join(e.dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saKey,
		"--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		// No controller manager creates default ServiceAccounts, so the
		// admission plugin that requires one would reject every pod.
		"--disable-admission-plugins=ServiceAccount",
		// The "kubernetes" Service's endpoints would point at 127.0.0.1,
		// which the API server refuses; nothing here needs them.
		"--endpoint-reconciler-type=none",
		// The agent's own DaemonSet pods are privileged; tests may create
		// them.
		"--allow-privileged=true",
	)...)
}

// writeServiceAccountKey writes the key that signs and verifies service
// account tokens; the API server will not start without one.
func writeServiceAccountKey(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate service account key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode service account key: %w", err)
	}
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pemBytes, 0o600); err != nil {
		return fmt.Errorf("write service account key: %w", err)
	}
	return nil
}

// insecureClient talks to the self-signed API server for readiness probes.
func insecureClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test server, self-signed
	}}
}
