#!/usr/bin/env bash
# Builds the real ztunnel (istio/ztunnel, Rust) from a checkout of its source
# and prints the binary's path, for test/mesh. ztunnel is not published as a
# crate, so the source is a directory the caller gives; its crates come from
# the crate registry through cargo.
#
# The checkout must be at the commit pinned in hack/ztunnel/COMMIT (the one
# place it is named). The tree is copied and, in the copy only, the optional
# git dependency boring-rustls-provider is dropped from Cargo.toml: cargo
# resolves every optional dependency when it reads the manifest, and a build
# that can reach only the crate registry cannot fetch a git one. The build
# uses ring for TLS (--no-default-features --features tls-ring): no C
# toolchain for aws-lc or BoringSSL, no jemalloc.
#
# Usage: hack/ztunnel/build.sh <ztunnel source dir>   (prints the binary's path)
# Cache: ${SLUICE_CACHE:-$HOME/.cache/sluice}/ztunnel/<commit>/ztunnel, and
# cargo's target dir beside it so a rebuild is incremental. A warm run does
# nothing. A cold debug build takes ~16 min on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
commit="$(tr -d '[:space:]' <"$here/COMMIT")"
cache="${SLUICE_CACHE:-$HOME/.cache/sluice}"
dir="$cache/ztunnel/$commit"
bin="$dir/ztunnel"

if [[ ! -x "$bin" ]]; then
	src="${1:?usage: hack/ztunnel/build.sh <a checkout of istio/ztunnel at $commit>}"
	if [[ ! -f "$src/Cargo.toml" || ! -f "$src/src/main.rs" ]]; then
		echo "build.sh: $src is not a ztunnel source tree (no Cargo.toml or src/main.rs)" >&2
		exit 1
	fi
	# A checkout at another commit would be cached under the pinned one.
	have="$(git -C "$src" rev-parse HEAD 2>/dev/null || true)"
	if [[ "$have" != "$commit" ]]; then
		echo "build.sh: $src is at '${have:-no git commit}', want $commit (hack/ztunnel/COMMIT)" >&2
		exit 1
	fi
	mkdir -p "$dir"
	exec 9>"$dir/.lock"
	flock 9
	if [[ ! -x "$bin" ]]; then
		echo "build.sh: building ztunnel $commit with cargo (a cold debug build takes ~16 min on 2 cores)" >&2
		rm -rf "$dir/src"
		mkdir -p "$dir/src"
		tar -C "$src" --exclude=./.git --exclude=./target --exclude=./vendor/boringssl-fips -cf - . | tar -C "$dir/src" -xf -
		# Drop the git dependency and the one feature line that names it.
		sed -i -e '/^boring-rustls-provider[[:space:]]*=/d' \
			-e 's/, *"boring-rustls-provider\/[a-z-]*"//' "$dir/src/Cargo.toml"
		if grep -q 'boring-rustls-provider' "$dir/src/Cargo.toml"; then
			echo "build.sh: Cargo.toml still names boring-rustls-provider after the edit" >&2
			exit 1
		fi
		(cd "$dir/src" && CARGO_TARGET_DIR="$dir/target" \
			cargo build --no-default-features --features tls-ring --bin ztunnel) >&2
		# Without its debug sections: the image stays small, and the
		# symbols a backtrace needs are kept.
		strip --strip-debug -o "$dir/.ztunnel.tmp" "$dir/target/debug/ztunnel"
		mv "$dir/.ztunnel.tmp" "$bin"
	fi
	exec 9>&-
fi
echo "$bin"
