#!/usr/bin/env bash
# Builds kube-apiserver from k8s.io/kubernetes through the Go module proxy,
# for tests that need a real API server (internal/kubetest). No git clone and
# no release download: the module proxy is the one source we rely on.
#
# k8s.io/kubernetes is not meant to be a dependency: its go.mod points every
# k8s.io staging module at ./staging/src/... and requires them at v0.0.0. A
# scratch module outside the repo requires it and replaces each staging module
# with its published v0.<minor>.<patch> tag, so the main module's go.mod is
# never touched.
#
# Usage: hack/kube-apiserver/build.sh [version]   (prints the binary's path)
# Cache: ${SLUICE_CACHE:-$HOME/.cache/sluice}/kube/<version>/kube-apiserver;
# a warm run does nothing.
set -euo pipefail

version="${1:-${KUBE_VERSION:-v1.37.2}}"
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
out="$cache/kube/$version"
bin="$out/kube-apiserver"

mkdir -p "$out"
# Two test packages may ask for the binary at once; one builds, the other
# waits and then finds it.
exec 9>"$out/.lock"
flock 9

if [[ -x "$bin" ]]; then
	echo "$bin"
	exit 0
fi

# v1.37.2 -> v0.37.2: the staging modules are tagged with major version 0.
staging="v0.${version#v1.}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

# Only the .mod file is fetched here, not the module zip.
kmod="$(go list -m -f '{{.GoMod}}' "k8s.io/kubernetes@$version")"
# The staging modules are exactly the ones k8s.io/kubernetes replaces with a
# local path. sample-cli-plugin and sample-controller are examples that are
# never published at a version.
mapfile -t mods < <(
	awk '/^replace \($/ {in_block=1; next} in_block && /^\)/ {in_block=0} in_block && $2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$kmod" |
		grep -v -x -e k8s.io/sample-cli-plugin -e k8s.io/sample-controller
)
if [[ ${#mods[@]} -eq 0 ]]; then
	echo "build.sh: found no staging modules in $kmod" >&2
	exit 1
fi

{
	echo "module sluice.local/kube-apiserver"
	echo
	echo "go $(go list -m -f '{{.GoVersion}}' "k8s.io/kubernetes@$version")"
	echo
	# Kubernetes builds with this; without it the binary would get our Go's
	# defaults for GODEBUG settings instead of the ones upstream tested.
	echo "godebug default=go1.26"
	echo
	echo "require k8s.io/kubernetes $version"
	echo
	echo "replace ("
	for m in "${mods[@]}"; do
		echo "	$m => $m $staging"
	done
	echo ")"
} >go.mod

echo "build.sh: building kube-apiserver $version (cold builds take minutes)" >&2
go get "k8s.io/kubernetes/cmd/kube-apiserver@$version" >&2

pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitTreeState=clean"
ldflags+=" -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(cut -d. -f2 <<<"$version")"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin.tmp" k8s.io/kubernetes/cmd/kube-apiserver
mv "$bin.tmp" "$bin"
echo "$bin"
