package main

import (
	"log/slog"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/policy"
)

// kubeSide is the agent's Kubernetes side, built whole or not at all (a
// standalone agent, no --kubeconfig, has none): the API server's config,
// the node's informers and the policy over them, and the client and Event
// recorder the writers (repair, taint, node condition, ambient
// annotations) share. The informers keep a client of their own: their
// LISTs and watches never wait behind the writers' rate limit.
type kubeSide struct {
	rc        *rest.Config
	informers *kubecache.Cache
	policy    *policy.Kube
	client    kubernetes.Interface
	rec       *events.Recorder
}

// newKubeSide builds the Kubernetes side from cfg's kubeconfig. Nothing
// runs yet: the informers start as a part, the recorder's queue is
// flushed by the caller's closer.
func newKubeSide(cfg *config, log *slog.Logger) (*kubeSide, error) {
	rc, err := restConfig(cfg.kubeconfig)
	if err != nil {
		return nil, err
	}
	reads, informers, err := newInformers(cfg, rc, log)
	if err != nil {
		return nil, err
	}
	pol, err := newKubePolicy(cfg, reads, informers, log)
	if err != nil {
		return nil, err
	}
	client, rec, err := newEvents(cfg, rc, log)
	if err != nil {
		return nil, err
	}
	return &kubeSide{rc: rc, informers: informers, policy: pol, client: client, rec: rec}, nil
}

// recorder is the Event recorder; nil, which records nothing, standalone.
func (k *kubeSide) recorder() *events.Recorder {
	if k == nil {
		return nil
	}
	return k.rec
}

// config is the API server's config; nil standalone.
func (k *kubeSide) config() *rest.Config {
	if k == nil {
		return nil
	}
	return k.rc
}
