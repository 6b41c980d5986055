#!/usr/bin/env bash
# promtool.sh: prints the path of promtool, taken once from Debian's
# prometheus package into the cache outside the repo
# (${SLUICE_CACHE:-$HOME/.cache/sluice}/tools/promtool-VERSION). The package
# is downloaded and unpacked, never installed: no Prometheus service is set
# up or started on the machine. test/deploy checks the chart's alert rules
# with it.
set -euo pipefail
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}/tools"
candidate() { apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}'; }
version=$(candidate)
if [[ -z "$version" || "$version" == "(none)" ]]; then
	apt-get update -qq >&2
	version=$(candidate)
fi
[[ -n "$version" && "$version" != "(none)" ]] || { echo "promtool.sh: no prometheus package in apt's lists" >&2; exit 1; }
dir="$cache/promtool-${version//[^A-Za-z0-9.+-]/_}"
if [[ ! -x "$dir/promtool" ]]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$tmp" && apt-get download "prometheus=$version" >/dev/null 2>&1) ||
		{ echo "promtool.sh: apt-get download prometheus=$version failed" >&2; exit 1; }
	dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
	mkdir -p "$dir"
	install -m 0755 "$tmp/x/usr/bin/promtool" "$dir/promtool"
fi
echo "$dir/promtool"
