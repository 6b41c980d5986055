package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
)

// Version is the Kubernetes release the tests run against.
const Version = "v1.37.2"

// apiserverBinary returns the kube-apiserver to run: $SLUICE_KUBE_APISERVER
// when set, else the cached build `make kube-apiserver` leaves. Tests never
// build it themselves: a cold build takes minutes on a small machine, which
// would land inside one test's timeout; the error names the command instead.
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
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("kube-apiserver %s is not built (%w): run `make kube-apiserver` at the repository root, "+
			"or set SLUICE_KUBE_APISERVER", Version, err)
	}
	return bin, nil
}
