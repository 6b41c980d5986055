#!/usr/bin/env bash
# Runs helm, building it first from the Go module proxy if it is not cached.
# No release download and no install script: the module proxy is the one
# source we rely on (as hack/kube/build.sh does for the API server).
#
# Usage: hack/helm/helm.sh <helm args...>
#        hack/helm/helm.sh --path        (prints the binary's path, builds if needed)
# Cache: ${SLUICE_CACHE:-$HOME/.cache/sluice}/tools/helm-<version>/helm;
# a warm run only execs it.
set -euo pipefail

version="${HELM_VERSION:-v3.22.0}"
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
dir="$cache/tools/helm-$version"
bin="$dir/helm"

if [[ ! -x "$bin" ]]; then
	mkdir -p "$dir"
	# Two test packages or a test and a person may ask at once; one builds,
	# the other waits and then finds it.
	exec 9>"$dir/.lock"
	flock 9
	if [[ ! -x "$bin" ]]; then
		echo "helm.sh: building helm $version from the Go module proxy (a cold build takes a few minutes)" >&2
		# Outside the repo so the main module's go.mod is never consulted.
		# GOFLAGS is cleared: a -mod or -buildvcs setting from the caller
		# means nothing to `go install pkg@version`.
		# Installed into a temp dir and renamed, so a reader that does not
		# take the lock never runs a half-written binary.
		tmp="$(mktemp -d "$dir/.build-XXXXXX")"
		trap 'rm -rf "$tmp"' EXIT
		(cd / && GOBIN="$tmp" GOFLAGS='' CGO_ENABLED=0 go install -trimpath \
			-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
			"helm.sh/helm/v3/cmd/helm@$version") >&2
		mv "$tmp/helm" "$bin"
		rmdir "$tmp"
		trap - EXIT
	fi
	exec 9>&-
fi

if [[ "${1:-}" == "--path" ]]; then
	echo "$bin"
	exit 0
fi
exec "$bin" "$@"
