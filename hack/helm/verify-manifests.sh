#!/usr/bin/env bash
# Fails when deploy/manifests/sluice.yaml is not what the chart renders now.
set -euo pipefail
cd "$(dirname "$0")/../.."

tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
hack/helm/manifests.sh - >"$tmp"
if ! diff -u deploy/manifests/sluice.yaml "$tmp" >&2; then
	echo "deploy/manifests/sluice.yaml is stale: run 'make manifests' and commit" >&2
	exit 1
fi
