#!/usr/bin/env bash
# Builds kube-apiserver alone (see hack/kube/build.sh, which builds the whole
# set the same way) and prints the binary's path, for internal/kubetest.
#
# Usage: hack/kube-apiserver/build.sh [version]
set -euo pipefail
version="${1:-${KUBE_VERSION:-v1.37.2}}"
dir="$("$(dirname "$0")/../kube/build.sh" "$version" kube-apiserver)"
echo "$dir/kube-apiserver"
