#!/usr/bin/env bash
# Builds istiod (pilot-discovery) from the Istio module that test/istio's
# go.mod pins, and prints the binary's path, for test/mesh. Built in a
# scratch copy of test/istio's go.mod and go.sum, so every dependency's
# version is the one that module resolves; the copy only gains the go.sum
# lines of packages test/istio does not import (-mod=mod), and neither
# test/istio nor sluice's own go.mod is touched.
#
# Usage: hack/istiod/build.sh [package]   (prints the binary's path)
# package is below istio.io/istio, pilot/cmd/pilot-discovery by default;
# test/peer builds cni/cmd/install-cni, cni/cmd/istio-cni and
# pilot/cmd/pilot-agent with it.
# Cache: ${SLUICE_CACHE:-$HOME/.cache/sluice}/istiod/<istio version>/<the
# package's last element>; a warm run does nothing.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
mod="$root/test/istio"
version="$(cd "$mod" && GOFLAGS='' go list -m -f '{{.Version}}' istio.io/istio)"
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
dir="$cache/istiod/$version"
pkg="${1:-pilot/cmd/pilot-discovery}"
name="$(basename "$pkg")"
bin="$dir/$name"

if [[ ! -x "$bin" ]]; then
	mkdir -p "$dir"
	# Two test packages or a test and a person may ask at once; one builds,
	# the other waits and then finds it.
	exec 9>"$dir/.lock"
	flock 9
	if [[ ! -x "$bin" ]]; then
		echo "build.sh: building $name $version from the Go module proxy (a cold build takes minutes)" >&2
		tmp="$(mktemp -d "$dir/.build-XXXXXX")"
		trap 'rm -rf "$tmp"' EXIT
		mkdir "$tmp/mod"
		cp "$mod/go.mod" "$mod/go.sum" "$tmp/mod/"
		(cd "$tmp/mod" && GOFLAGS='' go mod edit -replace "github.com/sluicemesh/sluice=$root" &&
			GOFLAGS='-mod=mod' CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' \
				-o "$tmp/$name" "istio.io/istio/$pkg") >&2
		# The selected version must still be the pinned one.
		got="$(cd "$tmp/mod" && GOFLAGS='' go list -m -f '{{.Version}}' istio.io/istio)"
		if [[ "$got" != "$version" ]]; then
			echo "build.sh: istio.io/istio resolved to $got, want $version" >&2
			exit 1
		fi
		mv "$tmp/$name" "$bin"
		rm -rf "$tmp"
		trap - EXIT
	fi
	exec 9>&-
fi
echo "$bin"
