#!/usr/bin/env bash
# Builds Multus's thin CNI plugin (cmd/multus: the meta-plugin that reads a
# pod's k8s.v1.cni.cncf.io/networks annotation and execs each network's
# plugins itself, no daemon) from the Go module proxy and prints its path,
# for test/e2e's Multus test. No git clone and no release download.
#
# A scratch module outside the repo requires Multus at the pinned version,
# as hack/kube/build.sh does for Kubernetes, so sluice's go.mod never names
# it. (`go install pkg@version` would be shorter, but it asks the proxy for
# the module's version list to check deprecation, which the proxy here
# refuses for this module; `go get` of an exact version does not.)
#
# Usage: hack/multus/build.sh [version]   (prints the binary's path)
# Cache: ${SLUICE_CACHE:-$HOME/.cache/sluice}/multus/<version>/multus; a
# warm run does nothing.
set -euo pipefail

version="${1:-${MULTUS_VERSION:-v4.2.3}}"
# Multus v4 is published under its gopkg.in path (its go.mod's module line).
module=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
dir="$cache/multus/$version"
bin="$dir/multus"

if [[ ! -x "$bin" ]]; then
	mkdir -p "$dir"
	# Two test packages or a test and a person may ask at once; one builds,
	# the other waits and then finds it.
	exec 9>"$dir/.lock"
	flock 9
	if [[ ! -x "$bin" ]]; then
		echo "build.sh: building multus $version from the Go module proxy" >&2
		work="$(mktemp -d)"
		trap 'rm -rf "$work"' EXIT
		# GOFLAGS is cleared: a -mod setting from the caller means nothing
		# to the scratch module.
		(
			cd "$work"
			# Multus's own go line, so the binary gets the GODEBUG defaults
			# upstream tested with.
			printf 'module sluice.local/multus\n\ngo %s\n' \
				"$(GOFLAGS='' go list -m -f '{{.GoVersion}}' "$module@$version")" >go.mod
			GOFLAGS='' go get "$module/cmd/multus@$version"
			GOFLAGS='' CGO_ENABLED=0 go build -trimpath \
				-ldflags "-s -w -X $module/pkg/multus.version=$version" \
				-o "$work/multus" "$module/cmd/multus"
		) >&2
		# Renamed into place, so a reader that does not take the lock never
		# runs a half-written binary.
		mv "$work/multus" "$dir/.multus.tmp"
		mv "$dir/.multus.tmp" "$bin"
	fi
	exec 9>&-
fi
echo "$bin"
