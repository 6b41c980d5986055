#!/usr/bin/env bash
# gotool.sh MODULE/CMD VERSION [ARGS...]: run a Go command-line tool at a
# pinned version, built once from the Go module proxy into the cache
# outside the repo (${SLUICE_CACHE:-$HOME/.cache/sluice}/tools/NAME-VERSION-GOVERSION:
# a tool built by an older Go cannot load packages that need a newer one).
set -euo pipefail
pkg=$1 version=$2
shift 2
dir="${SLUICE_CACHE:-$HOME/.cache/sluice}/tools/$(basename "$pkg")-$version-$(go env GOVERSION)"
if [ ! -x "$dir/$(basename "$pkg")" ]; then
	GOBIN="$dir" GOFLAGS= CGO_ENABLED=0 go install "$pkg@$version" >&2
fi
exec "$dir/$(basename "$pkg")" "$@"
