#!/usr/bin/env bash
# node-down.sh: stops the cluster hack/node-up.sh started, and says whether
# the teardown left anything behind.
set -euo pipefail
state="${SLUICE_NODE_STATE:-/tmp/sluice-node-up}"
if [[ ! -f "$state/pid" ]]; then
	echo "node-down.sh: no cluster state in $state" >&2
	exit 1
fi
pid="$(cat "$state/pid")"
if kill -0 "$pid" 2>/dev/null; then
	kill -TERM "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
fi
if [[ -f "$state/stopped" ]]; then
	cat "$state/stopped"
	grep -q '^clean' "$state/stopped" || exit 1
else
	echo "node-down.sh: the cluster process ended without saying how; see $state/node.log" >&2
	exit 1
fi
rm -rf "$state"
