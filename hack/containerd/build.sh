#!/usr/bin/env bash
# Builds containerd 2.x (containerd, containerd-shim-runc-v2, ctr) and crictl
# from the Go module proxy, for the NRI tests (test/nri). The machine's own
# containerd is 1.6, which has no NRI that delivers pod IPs; runc is the
# machine's.
#
# Usage: hack/containerd/build.sh [version]   (prints the binaries' dir)
# Cache: ${SLUICE_CACHE:-$HOME/.cache/sluice}/containerd/<version>/ and
# .../tools/crictl-<crictl version>/crictl (the same crictl the e2e runtime
# tests build). A warm run does nothing. Cold: about 4 CPU-minutes (measured
# 4m user time; wall time depends on what else the machine is building).
set -euo pipefail

version="${1:-${CONTAINERD_VERSION:-v2.4.2}}"
crictl_version="${CRICTL_VERSION:-v1.37.0}"
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
out="$cache/containerd/$version"
crictl_dir="$cache/tools/crictl-$crictl_version"

mkdir -p "$out" "$crictl_dir"
# Two test packages may ask at once; one builds, the other waits.
exec 9>"$out/.lock"
flock 9

build() { # dir env... -- go install args...
	local dir="$1"
	shift
	local envs=()
	while [[ "$1" != -- ]]; do
		envs+=("$1")
		shift
	done
	shift
	# Outside any module: @version installs ignore go.mod anyway.
	(cd / && env GOBIN="$dir" GOFLAGS= "${envs[@]}" go install -trimpath "$@") >&2
}

mod=github.com/containerd/containerd/v2
if [[ ! -x "$out/containerd" ]]; then
	echo "build.sh: building containerd $version (about a minute cold)" >&2
	build "$out" CGO_ENABLED=1 -- -tags "no_btrfs urfave_cli_no_docs" "$mod/cmd/containerd@$version"
fi
if [[ ! -x "$out/containerd-shim-runc-v2" ]]; then
	build "$out" CGO_ENABLED=0 -- -tags "no_grpc urfave_cli_no_docs" "$mod/cmd/containerd-shim-runc-v2@$version"
fi
if [[ ! -x "$out/ctr" ]]; then
	build "$out" CGO_ENABLED=0 -- -tags "urfave_cli_no_docs" "$mod/cmd/ctr@$version"
fi
if [[ ! -x "$crictl_dir/crictl" ]]; then
	build "$crictl_dir" CGO_ENABLED=0 -- "sigs.k8s.io/cri-tools/cmd/crictl@$crictl_version"
fi
ln -sf "$crictl_dir/crictl" "$out/crictl"
echo "$out"
