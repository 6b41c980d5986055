#!/usr/bin/env bash
# Builds Istio's CNI plugin, istio-cni (istio.io/istio/cni/cmd/istio-cni),
# through the Go module proxy at a pinned version, for hack/bench to run as
# a peer, the way hack/kube/build.sh builds Kubernetes. Nothing of Istio's
# is committed here: a scratch module outside the repo requires it, and the
# binary is cached.
#
# Usage: hack/bench/istio-cni/build.sh [version]   (prints the binary's path)
# With ISTIO_CNI_CACHED_ONLY=1 it builds nothing and exits 3 when the binary
# is not cached yet (the bench's -smoke run, which must stay short).
# Cache: ${SLUICE_CACHE:-$HOME/.cache/sluice}/istio-cni/<version>/istio-cni;
# a warm run does nothing.
set -euo pipefail

# istio.io/istio has no module tags; this is master of late August 2026,
# the pseudo-version the project's parity tests pin.
version="${1:-${ISTIO_VERSION:-v0.0.0-20260827124520-eed52ebb66ad}}"
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
out="$cache/istio-cni/$version"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9
if [[ -x "$out/istio-cni" ]]; then
	echo "$out/istio-cni"
	exit 0
fi
if [[ -n "${ISTIO_CNI_CACHED_ONLY:-}" ]]; then
	echo "istio-cni $version is not built yet: run $0" >&2
	exit 3
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init sluice.invalid/istio-cni-build >/dev/null 2>&1
GOFLAGS=-mod=mod go get "istio.io/istio@$version" >&2
# As the reference plugins and sluice are built: static, stripped, trimmed.
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags '-s -w' -o "$work/istio-cni" istio.io/istio/cni/cmd/istio-cni >&2
mv "$work/istio-cni" "$out/istio-cni"
echo "$out/istio-cni"
