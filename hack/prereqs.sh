#!/usr/bin/env bash
# prereqs.sh: checks that every tool `make test` and `make demo` run is on
# PATH. As root on Debian it installs the missing ones with apt-get; anywhere
# else it stops at once with the command to run, instead of a test failing
# minutes later with "not found".
set -euo pipefail

# tool:Debian package. Why each is needed:
#   protoc        make verify regenerates api/
#   nft           tests read back kernel state with `nft`
#   iptables      benchmarks; kube-proxy on the test node
#   ip, nsenter   network and mount namespaces for tests and the test node
#   flock, mount  build scripts serialise on a lock; the test node's mounts
#   etcd          the test kube-apiserver's store
#   containerd... the container runtime of the e2e and node tests
#   git           make's VERSION, govulncheck and helm builds
#   qemu-aarch64  the arm64 image's binaries run under qemu-user in tests
tools=(
	protoc:protobuf-compiler
	nft:nftables
	iptables:iptables
	ip:iproute2
	nsenter:util-linux
	flock:util-linux
	mount:mount
	etcd:etcd-server
	containerd:containerd
	ctr:containerd
	containerd-shim-runc-v2:containerd
	runc:runc
	git:git
	qemu-aarch64:qemu-user
)

# check fills missing with the packages of the tools not on PATH.
check() {
	missing=()
	for t in "${tools[@]}"; do
		tool=${t%%:*} pkg=${t#*:}
		if ! command -v "$tool" >/dev/null 2>&1; then
			[[ " ${missing[*]} " == *" $pkg "* ]] || missing+=("$pkg")
		fi
	done
}
check
# Go modules come over HTTPS; a machine without the CA bundle cannot fetch
# any of them.
if [[ ! -e /etc/ssl/certs/ca-certificates.crt && -e /etc/debian_version ]]; then
	missing+=(ca-certificates)
fi

if ! command -v go >/dev/null 2>&1; then
	echo "prereqs: go not on PATH: install Go $(sed -n 's/^go //p' go.mod 2>/dev/null || echo 1.26) or later and add it to PATH (for example /usr/local/go/bin)" >&2
	exit 1
fi

if [[ ${#missing[@]} -eq 0 ]]; then
	exit 0
fi

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 || ! -e /etc/debian_version ]] || ! command -v apt-get >/dev/null 2>&1; then
	echo "prereqs: missing Debian packages: ${missing[*]}" >&2
	echo "prereqs: as root, run: apt-get update && $cmd" >&2
	exit 1
fi

echo "prereqs: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086 # one word per package
apt-get install -y -qq --no-install-recommends ${missing[*]} >/dev/null
check
if [[ ${#missing[@]} -ne 0 ]]; then
	echo "prereqs: still missing after apt-get install: ${missing[*]} (is /usr/sbin on PATH?)" >&2
	exit 1
fi
