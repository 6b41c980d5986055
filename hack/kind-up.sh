#!/usr/bin/env bash
# Creates a kind cluster (if it does not exist yet), builds the sluice image
# from this tree, loads it into the cluster's nodes and installs the chart,
# then waits for the agent on every node. Run it again after a change: it
# rebuilds, reloads and upgrades (a rolling update of the DaemonSet).
#
# Needs docker (a running engine), kind and kubectl on PATH; helm comes from
# hack/helm/helm.sh. kind's own CNI (kindnet) stays the primary; sluice is
# chained after it in /etc/cni/net.d/10-kindnet-sluice.conflist, which sorts
# just before kindnet's own file.
#
# Usage: hack/kind-up.sh [extra helm args, e.g. --set ambient.enabled=true]
# Env:   KIND_CLUSTER (sluice), KIND_NODES (workers, 1), NAMESPACE (kube-system),
#        IMAGE (sluice:dev), KIND_NODE_IMAGE (kind's default)
# Remove: kind delete cluster --name sluice
set -euo pipefail
cd "$(dirname "$0")/.."

cluster="${KIND_CLUSTER:-sluice}"
workers="${KIND_NODES:-1}"
namespace="${NAMESPACE:-kube-system}"
image="${IMAGE:-sluice:dev}"

for tool in docker kind kubectl; do
	if ! command -v "$tool" >/dev/null; then
		echo "kind-up.sh: $tool is not on PATH" >&2
		exit 1
	fi
done
if ! docker info >/dev/null 2>&1; then
	echo "kind-up.sh: no Docker engine answers (docker info failed)" >&2
	exit 1
fi

if ! kind get clusters 2>/dev/null | grep -qx "$cluster"; then
	config="$(mktemp)"
	trap 'rm -f "$config"' EXIT
	{
		echo "kind: Cluster"
		echo "apiVersion: kind.x-k8s.io/v1alpha4"
		echo "nodes:"
		echo "  - role: control-plane"
		for _ in $(seq "$workers"); do
			echo "  - role: worker"
		done
	} >"$config"
	kind create cluster --name "$cluster" --config "$config" \
		${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 120s
fi
kubectl config use-context "kind-$cluster" >/dev/null

version="$(git describe --tags --always --dirty 2>/dev/null || echo dev)"
docker build -t "$image" --build-arg VERSION="$version" .
kind load docker-image "$image" --name "$cluster"

# pullPolicy Never: the image exists only on the nodes. The pod template
# carries the image's ID, so a rebuilt image with the same tag still rolls.
id="$(docker image inspect --format '{{.Id}}' "$image")"
hack/helm/helm.sh upgrade --install sluice deploy/helm/sluice \
	--kube-context "kind-$cluster" --namespace "$namespace" --create-namespace \
	--set image.repository="${image%:*}" --set image.tag="${image##*:}" \
	--set image.pullPolicy=Never \
	--set-string podAnnotations.sluice\\.dev/image-id="$id" \
	"$@"

kubectl -n "$namespace" rollout status daemonset/sluice-agent --timeout=180s
kubectl -n "$namespace" exec daemonset/sluice-agent -- sluice-agent status
echo
echo "kind-up.sh: sluice runs in kind cluster '$cluster' (namespace $namespace)."
echo "  kubectl -n $namespace logs daemonset/sluice-agent"
echo "  docker exec $cluster-worker cat /etc/cni/net.d/10-kindnet.conflist"
