package kubetest

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// startEtcd runs a single-member etcd on two free loopback ports with its
// data under dir, and waits until it serves. etcd comes from the system
// (Debian's etcd-server package).
func startEtcd(dir string) (proc *process, url string, err error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, "", fmt.Errorf("find etcd: %w (install Debian's etcd-server package)", err)
	}
	client, err := freePort()
	if err != nil {
		return nil, "", err
	}
	peer, err := freePort()
	if err != nil {
		return nil, "", err
	}
	url = "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	proc, err = startProcess("etcd", filepath.Join(dir, "etcd.log"), bin,
		"--name=kubetest",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+url,
		"--advertise-client-urls="+url,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
		// Tests write little; a smaller WAL snapshot interval keeps the
		// data dir small without costing anything noticeable.
		"--snapshot-count=10000",
	)
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitHTTP(ctx, proc, http.DefaultClient, url+"/health", ""); err != nil {
		proc.Stop(5 * time.Second)
		return nil, "", fmt.Errorf("wait for etcd at %s: %w\n%s", url, err, proc.LogTail())
	}
	return proc, url, nil
}
