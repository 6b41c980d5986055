# syntax=docker/dockerfile:1
# The sluice image: the node agent and the CNI plugin it installs, both
# static, on distroless. The agent runs as root with a handful of
# capabilities (see deploy/helm/sluice/templates/daemonset.yaml).
#
#   docker build -t sluice:dev --build-arg VERSION=$(git describe --tags --always --dirty) .
#
# hack/kind-up.sh builds it and loads it into a kind cluster.

ARG GO_VERSION=1.26.10

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Module downloads get their own layer: they change far less often than code.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
	--mount=type=cache,target=/root/.cache/go-build \
	ldflags="-s -w -X github.com/sluicemesh/sluice/internal/buildinfo.Version=${VERSION}" && \
	CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
		go build -tags grpcnotrace -trimpath -ldflags "$ldflags" -o /out/sluice ./plugin && \
	CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
		go build -tags grpcnotrace -trimpath -ldflags "$ldflags" -o /out/sluice-agent ./daemon

# static: no libc, CA certificates and tzdata only; runs as root by default,
# which the agent needs for the host paths it writes.
FROM gcr.io/distroless/static-debian12
ARG VERSION=dev
LABEL org.opencontainers.image.title="sluice" \
	org.opencontainers.image.description="CNI node agent for service-mesh traffic capture" \
	org.opencontainers.image.source="https://github.com/sluicemesh/sluice" \
	org.opencontainers.image.licenses="Apache-2.0" \
	org.opencontainers.image.version="${VERSION}"
# The agent installs the plugin from next to itself (--plugin-binary empty).
COPY --from=build /out/sluice /out/sluice-agent /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/sluice-agent"]
