#!/usr/bin/env bash
# govulncheck against a vulnerability database built locally from the
# golang.org/x/vulndb module (its OSV files), fetched through the Go module
# proxy like any dependency: the public database host is not reachable from
# every build machine. Database and tool are cached outside the repo, keyed
# by version.
set -euo pipefail
cd "$(dirname "$0")/../.."

VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018
VULN_VERSION=v1.9.0
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
db="$cache/vulndb/$VULNDB_VERSION"

if [ ! -f "$db/index/db.json" ]; then
	src=$(GOFLAGS= go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	tmp=$(mktemp -d "$cache/vulndb.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	GOFLAGS= go run "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION" -vulns "$src/data/osv" -out "$tmp/db"
	mkdir -p "$(dirname "$db")"
	mv "$tmp/db" "$db"
fi
hack/gotool.sh golang.org/x/vuln/cmd/govulncheck "$VULN_VERSION" -format json -db "file://$db" ./... |
	go run ./hack/govulncheck
