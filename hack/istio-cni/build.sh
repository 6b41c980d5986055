#!/usr/bin/env bash
# Builds istio-cni's node agent (istio.io/istio/cni/cmd/install-cni) and
# plugin (istio.io/istio/cni/cmd/istio-cni) from the Istio module that
# test/istio's go.mod pins, for test/peer to install with Istio's own
# istio-cni chart. Built in a scratch copy of test/istio's go.mod and
# go.sum, as hack/istiod/build.sh builds istiod, so every dependency's
# version is the one that module resolves; neither test/istio nor sluice's
# own go.mod is touched.
#
# Usage: hack/istio-cni/build.sh [package...]   (prints the directory
# holding the binaries). Packages are below istio.io/istio; the default is
# cni/cmd/install-cni and cni/cmd/istio-cni. test/peer also builds
# pilot/cmd/pilot-agent for the real istio-validation init container.
# Cache: ${SLUICE_CACHE:-$HOME/.cache/sluice}/istio-cni-node/<istio version>/
# <each package's last element>; a warm run does nothing. (hack/bench/istio-cni
# builds the plugin alone against the module's own go.mod, into istio-cni/.)
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
mod="$root/test/istio"
version="$(cd "$mod" && GOFLAGS='' go list -m -f '{{.Version}}' istio.io/istio)"
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
dir="$cache/istio-cni-node/$version"
pkgs=("$@")
[[ ${#pkgs[@]} -gt 0 ]] || pkgs=(cni/cmd/install-cni cni/cmd/istio-cni)

missing() {
	local p
	for p in "${pkgs[@]}"; do
		[[ -x "$dir/$(basename "$p")" ]] || return 0
	done
	return 1
}

if missing; then
	mkdir -p "$dir"
	# Two test packages or a test and a person may ask at once; one builds,
	# the other waits and then finds it.
	exec 9>"$dir/.lock"
	flock 9
	if missing; then
		echo "build.sh: building ${pkgs[*]} $version from the Go module proxy (a cold build takes minutes)" >&2
		tmp="$(mktemp -d "$dir/.build-XXXXXX")"
		trap 'rm -rf "$tmp"' EXIT
		mkdir "$tmp/mod"
		cp "$mod/go.mod" "$mod/go.sum" "$tmp/mod/"
		(cd "$tmp/mod" && GOFLAGS='' go mod edit -replace "github.com/sluicemesh/sluice=$root") >&2
		for p in "${pkgs[@]}"; do
			(cd "$tmp/mod" && GOFLAGS='-mod=mod' CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' \
				-o "$tmp/$(basename "$p")" "istio.io/istio/$p") >&2
		done
		# The selected version must still be the pinned one.
		got="$(cd "$tmp/mod" && GOFLAGS='' go list -m -f '{{.Version}}' istio.io/istio)"
		if [[ "$got" != "$version" ]]; then
			echo "build.sh: istio.io/istio resolved to $got, want $version" >&2
			exit 1
		fi
		for p in "${pkgs[@]}"; do
			mv "$tmp/$(basename "$p")" "$dir/"
		done
		rm -rf "$tmp"
		trap - EXIT
	fi
	exec 9>&-
fi
echo "$dir"
