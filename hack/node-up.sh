#!/usr/bin/env bash
# node-up.sh: starts the test node cluster (test/harness/nodetest: etcd,
# kube-apiserver, controller-manager, scheduler on this machine; containerd,
# kubelet and kube-proxy in a node with its own network and mount
# namespaces) and leaves it running. Prints the kubeconfig's path.
#
#   hack/node-up.sh            # then:
#   export KUBECONFIG=$(hack/node-up.sh)   # or use the printed path
#   hack/helm/helm.sh install sluice deploy/helm/sluice -n kube-system \
#     --set image.repository=localhost/sluice --set image.tag=dev \
#     --set image.pullPolicy=Never
#   hack/node-down.sh
#
# Arguments are passed to hack/node, e.g. `hack/node-up.sh -containerd-1`
# for the machine's containerd 1.x and a cniVersion 1.0.0 primary conflist.
#
# Needs root. The state (kubeconfig, logs, pid) is in ${SLUICE_NODE_STATE:-/tmp/sluice-node-up}.
set -euo pipefail
cd "$(dirname "$0")/.."
state="${SLUICE_NODE_STATE:-/tmp/sluice-node-up}"
if [[ -f "$state/pid" ]] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then
	echo "node-up.sh: already running (pid $(cat "$state/pid")); hack/node-down.sh stops it" >&2
	echo "$state/kubeconfig"
	exit 0
fi
rm -rf "$state"
mkdir -p "$state"
go build -o "$state/node" ./hack/node
# Its own session: the cluster outlives this script and the terminal.
setsid "$state/node" -state "$state" "$@" >"$state/node.log" 2>&1 </dev/null &
echo $! >"$state/pid"
echo "node-up.sh: starting (cold: builds the Kubernetes binaries first, minutes; log $state/node.log)" >&2
while [[ ! -f "$state/ready" ]]; do
	if [[ -f "$state/stopped" ]] || ! kill -0 "$(cat "$state/pid")" 2>/dev/null; then
		echo "node-up.sh: the cluster did not start:" >&2
		tail -20 "$state/node.log" >&2
		exit 1
	fi
	sleep 1
done
cat "$state/ready" >&2
echo "$state/kubeconfig"
