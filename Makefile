# sluice — see README.md. Targets run as root on a Debian machine.
GO          ?= go
BIN         := bin
CACHE       ?= $(HOME)/.cache/sluice
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X github.com/sluicemesh/sluice/internal/buildinfo.Version=$(VERSION)
# Bounded fuzzing inside `make test`; `make fuzz FUZZTIME=10m` for longer runs.
FUZZTIME    ?= 10s

.PHONY: all build proto verify lint test demo fuzz clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sluice ./plugin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/sluice-agent ./daemon

proto:
	protoc -I api \
		--plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
		--plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc) \
		--go_out=api --go_opt=paths=source_relative \
		--go-grpc_out=api --go-grpc_opt=paths=source_relative \
		sluice/v1/agent.proto
