#!/usr/bin/env bash
# Builds Kubernetes' server commands from k8s.io/kubernetes through the Go
# module proxy, for tests that need a real control plane (test/harness/kubetest)
# or a real node (test/harness/nodetest). No git clone and no release download:
# the module proxy is the one source we rely on.
#
# k8s.io/kubernetes is not meant to be a dependency: its go.mod points every
# k8s.io staging module at ./staging/src/... and requires them at v0.0.0. A
# scratch module outside the repo requires it and replaces each staging module
# with its published v0.<minor>.<patch> tag, so the main module's go.mod is
# never touched. All commands are added with one `go get` and built with one
# `go build`: separate gets would let shared modules drift between them, and
# one build compiles the packages they share once.
#
# Usage: hack/kube/build.sh [version [command...]]   (prints the binaries' dir)
# Default commands: kube-apiserver kube-controller-manager kube-scheduler
# kubelet kube-proxy.
# Cache: ${SLUICE_CACHE:-$HOME/.cache/sluice}/kube/<version>/<command>; a warm
# run does nothing.
set -euo pipefail

version="${1:-${KUBE_VERSION:-v1.37.2}}"
shift || true
cmds=("$@")
if [[ ${#cmds[@]} -eq 0 ]]; then
	cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
fi
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
out="$cache/kube/$version"

mkdir -p "$out"
# Two test packages may ask at once; one builds, the other waits and then
# finds the binaries.
exec 9>"$out/.lock"
flock 9

missing=()
for c in "${cmds[@]}"; do
	[[ -x "$out/$c" ]] || missing+=("$c")
done
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "$out"
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
	echo "module sluice.local/kube"
	echo
	echo "go $(go list -m -f '{{.GoVersion}}' "k8s.io/kubernetes@$version")"
	echo
	# Kubernetes builds with this; without it the binaries would get our Go's
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

pkgs=()
for c in "${missing[@]}"; do
	pkgs+=("k8s.io/kubernetes/cmd/$c")
done
echo "build.sh: building ${missing[*]} $version (cold builds take minutes)" >&2
go get "${pkgs[@]/%/@$version}" >&2

pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitTreeState=clean"
ldflags+=" -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(cut -d. -f2 <<<"$version")"
mkdir -p "$work/bin"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$work/bin/" "${pkgs[@]}"
for c in "${missing[@]}"; do
	mv "$work/bin/$c" "$out/$c.tmp"
	mv "$out/$c.tmp" "$out/$c"
done
echo "$out"
