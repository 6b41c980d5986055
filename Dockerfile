# syntax=docker/dockerfile:1
# The sluice image for people with Docker: the node agent and the CNI plugin
# it installs, both static, on nothing but their SBOMs (/sbom/<binary>.cdx.json).
# `make image` builds the same image without Docker (hack/image); both hold
# exactly these four files and their parent directories, and the binaries
# are the same bytes (internal/productbuild is reproducible;
# internal/ociimage's TestDockerfileShipsTheImageFiles holds the list).
# To compare the filesystems:
#
#   docker build -t sluice:dev --build-arg VERSION=dev .
#   docker export $(docker create sluice:dev) | tar -t | sort
#   make image VERSION=dev   # an index for amd64 and arm64; this machine's
#   ctr -n k8s.io images import bin/image/sluice.tar   # layer is then in
#   ctr -n k8s.io images mount localhost/sluice:dev /mnt && find /mnt
#
# `docker buildx build --platform linux/amd64,linux/arm64` builds both
# platforms here too (the build stage cross-compiles; nothing runs on the
# target).
#
# (docker export adds the mount points a runtime creates: .dockerenv, dev/,
# etc/hostname, etc/hosts, etc/resolv.conf, proc/, sys/.)
#
# hack/kind-up.sh builds it and loads it into a kind cluster.

ARG GO_VERSION=1.27.3

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Module downloads get their own layer: they change far less often than code.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
ARG VERSION=dev
# The product build as `make build` runs it (internal/productbuild), and
# each binary's SBOM from its build info (internal/sbom).
RUN --mount=type=cache,target=/go/pkg/mod \
	--mount=type=cache,target=/root/.cache/go-build \
	go run ./hack/build -version "${VERSION}" -goos "${TARGETOS}" -goarch "${TARGETARCH}" -o /out -sbom /out/sbom

# The debug variant (`docker build --target debug`, tag <version>-debug,
# chart value variant: debug): the same binaries on Debian with a shell,
# nft, ip and ss, for looking at a node from the agent's pod. Defined before
# the product image so that a plain build still ends with it.
FROM debian:stable-slim AS debug
RUN apt-get update && apt-get install -y --no-install-recommends nftables iproute2 procps \
	&& rm -rf /var/lib/apt/lists/*
COPY --from=build /out/sluice /out/sluice-agent /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/sluice-agent"]

# Nothing but the binaries and their SBOMs: the agent reads its CA and
# token from the service account mount and needs no libc, CA bundle, tzdata
# or shell. It runs as root, which it needs for the host paths it writes.
FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title="sluice" \
	org.opencontainers.image.description="CNI node agent for service-mesh traffic capture" \
	org.opencontainers.image.source="https://github.com/sluicemesh/sluice" \
	org.opencontainers.image.licenses="Apache-2.0" \
	org.opencontainers.image.version="${VERSION}"
# The agent installs the plugin from next to itself (--plugin-binary empty).
COPY --from=build /out/sluice /out/sluice-agent /usr/local/bin/
COPY --from=build --chmod=0644 /out/sbom/sluice.cdx.json /out/sbom/sluice-agent.cdx.json /sbom/
ENTRYPOINT ["/usr/local/bin/sluice-agent"]
