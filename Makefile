# sluice — see README.md. Everything here runs as root on a Debian machine.
GO        ?= go
# The toolchain every build and test uses, fetched through the Go module
# proxy on first use: the machine's own Go may carry standard-library
# vulnerabilities a privileged agent must not ship (govulncheck fails on any).
# go.mod names it too, so a shell without this export refuses to build.
# (make 4.3 does not export to $(shell), hence the prefix below.)
export GOTOOLCHAIN := go1.27.3
BIN       := bin
# Helper binaries (reference CNI plugins) are cached outside the tree.
CACHE     ?= $(HOME)/.cache/sluice
PLUGINS   := $(CACHE)/cni-plugins/$(shell GOTOOLCHAIN=$(GOTOOLCHAIN) $(GO) list -m -f '{{.Version}}' github.com/containernetworking/plugins)
KUBE_VERSION ?= v1.37.2
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# `make test` fuzzes each target briefly; `make fuzz FUZZTIME=10m` digs deeper.
FUZZTIME  ?= 20000x
FUZZ_TARGETS := ./plugin:FuzzParseConfig ./plugin:FuzzParseArgs ./plugin:FuzzTraceContext ./daemon/podns:FuzzResolve \
	./daemon/rpc:FuzzCheckAttachment ./installer/conflist:FuzzInsertEntry \
	./installer/conflist:FuzzRemoveEntry ./installer/conflist:FuzzFromConf \
	./daemon/policy:FuzzSpecFromAnnotations ./internal/grpccall:FuzzAnswer ./internal/grpccall:FuzzAnswerOracle \
	./internal/cniwire:FuzzAddResponse ./internal/cniwire:FuzzDelResponse ./internal/cniwire:FuzzCheckResponse \
	./internal/cniwire:FuzzStatusResponse ./internal/cniwire:FuzzGCResponse \
	./internal/cniwire:FuzzAddRequest ./internal/cniwire:FuzzGCRequest ./daemon/istiovalues:FuzzDocument

# Scripts and tests find their cached helper binaries here too.
export SLUICE_CACHE := $(CACHE)

.PHONY: all prereqs build plugins multus kube-apiserver kube containerd istiod ztunnel proto manifests image image-docker verify lint test unit-nonroot fuzz demo bench clean

all: build

# Every tool the tests and the demo exec; as root on Debian the missing
# ones are installed with apt-get, elsewhere this stops with the command.
prereqs:
	@hack/prereqs.sh

# The product build (tags, ldflags, static) is spelled once, in
# internal/productbuild; tests, the bench and the image build the same way.
build:
	$(GO) run ./hack/build -version $(VERSION) -o $(BIN)

# The reference plugins the demo and the chain tests run before sluice.
plugins: $(PLUGINS)/bridge
$(PLUGINS)/bridge:
	mkdir -p $(PLUGINS)
	CGO_ENABLED=0 $(GO) build -o $(PLUGINS)/ \
		github.com/containernetworking/plugins/plugins/main/bridge \
		github.com/containernetworking/plugins/plugins/ipam/host-local \
		github.com/containernetworking/plugins/plugins/main/loopback

# Multus's thin plugin, for test/e2e's Multus test: built once from the
# module proxy into $(CACHE) at the version pinned in hack/multus/build.sh.
multus:
	hack/multus/build.sh >/dev/null

# The test kube-apiserver, built once from the module proxy into $(CACHE)
# (about 7 minutes cold on 2 cores; instant when cached).
kube-apiserver:
	hack/kube/build.sh $(KUBE_VERSION) kube-apiserver >/dev/null

# The test node's control plane, kubelet and kube-proxy, built together
# (about 7 minutes cold on 2 cores for all five; instant when cached).
kube:
	hack/kube/build.sh $(KUBE_VERSION) >/dev/null

# containerd 2.x, its runc shim, ctr and crictl for the NRI tests (test/nri),
# built from the module proxy into $(CACHE) (about 4 CPU-minutes cold;
# instant when cached). The machine's own containerd is left alone.
containerd:
	hack/containerd/build.sh >/dev/null

# istiod (pilot-discovery) for test/mesh, built from the Istio module
# test/istio pins and packed as an image, both cached under
# $(CACHE)/istiod/<version>/ (a few minutes cold; instant when cached).
istiod:
	$(GO) run ./hack/istiod/image >/dev/null

# The real ztunnel for test/mesh's ztunnel tests, built with cargo from a
# checkout of istio/ztunnel at the commit in hack/ztunnel/COMMIT (~16 min
# cold on 2 cores) and packed as an image, both cached under
# $(CACHE)/ztunnel/<commit>/. Without it those tests skip.
ztunnel:
	@test -n "$(ZTUNNEL_SRC)" || { echo "usage: make ztunnel ZTUNNEL_SRC=<a checkout of istio/ztunnel at $$(cat hack/ztunnel/COMMIT)>" >&2; exit 1; }
	hack/ztunnel/build.sh $(ZTUNNEL_SRC) >/dev/null
	$(GO) run ./hack/ztunnel/image >/dev/null

proto:
	protoc -I api \
		--plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
		--plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc) \
		--go_out=api --go_opt=paths=source_relative \
		--go-grpc_out=api --go-grpc_opt=paths=source_relative \
		sluice/v1/agent.proto zds/zds.proto

# deploy/manifests/sluice.yaml, rendered from the chart (helm built from
# the module proxy into $(CACHE) on first use).
manifests:
	hack/helm/manifests.sh

# OCI archives in bin/image, no Docker: the product image for amd64 and
# arm64 (an OCI image index; each platform's binaries in bin/<os>-<arch>/,
# their SBOMs in bin/sbom/), and the node tests' test-app and pause images.
# Reproducible: the same source gives the same digests. `make image-docker`
# builds the Dockerfile's (same filesystem) for people with Docker.
image: build
	$(GO) run ./hack/image -bin $(BIN) -version $(VERSION) -o $(BIN)/image

# What a release publishes, in bin/: make image's, and the chart packaged
# with its values schema (bin/sluice-<version>.tgz) and as an OCI artifact
# (an OCI layout in bin/chart/). The digests it prints are what a release
# signs (docs/install.md, Supply chain).
.PHONY: dist
dist:
	$(GO) run ./hack/image -bin $(BIN) -version $(VERSION) -o $(BIN)/image -chart deploy/helm/sluice

image-docker:
	docker build -t sluice:$(VERSION) --build-arg VERSION=$(VERSION) .

# Fails when generated code or manifests are stale, or the tree is not
# formatted and vetted.
verify: lint
	hack/helm/verify-manifests.sh
	hack/govulncheck/run.sh
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && cp -r api $$tmp/ && \
	$(MAKE) -s proto && \
	if ! diff -r $$tmp/api api >/dev/null; then \
		echo "generated code under api/ is stale: run 'make proto' and commit" >&2; \
		rm -rf api && cp -r $$tmp/api api; exit 1; fi

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:\n$$out" >&2; exit 1; fi
	$(GO) vet ./...
	hack/gotool.sh honnef.co/go/tools/cmd/staticcheck v0.8.2 ./...

# The suites that run a two-node test cluster run one at a time, after the
# rest: a pod churn of two a second loads the kernel's netns path enough to
# starve a neighbour's deadlines, and each has its own cluster to start.
# The simulated fleet (an API server filled with hundreds of nodes and
# thousands of pods, five agents) joins them for the same reason.
CLUSTER_SUITES := ./test/node ./test/lifecycle ./test/peer ./test/mesh ./test/fleet

test: prereqs build plugins multus kube containerd istiod verify
	$(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v -x -e '.*/test/node' -e '.*/test/lifecycle' -e '.*/test/peer' -e '.*/test/mesh' -e '.*/test/fleet')
	$(GO) test -count=1 -p 1 -timeout 30m $(CLUSTER_SUITES)
	cd test/istio && $(GO) test -timeout 15m ./...
	$(MAKE) -s unit-nonroot
	$(MAKE) -s fuzz

# What a pod's ruleset holds (redirect, pure), the agent's call and journal
# logic (over redirecttest's fake kernel), its Kubernetes decisions (over
# client-go's fake clientset), the running-pod jobs and the CNI ADD over
# the control-plane tier (test/harness/controlplane: objects in; nft text,
# annotations, Events out), its flags and wiring, and the plugin's verbs
# need no root: their test binaries run again as uid 65534, from their
# package dirs as go test runs them. The root-only tests in them skip
# there; they ran as root above. -tags noapiserver compiles out the real
# kube-apiserver tier (each package's apiserver_test.go), which also ran
# above. The import checks need the go command and the module cache under
# /root, so they are left to the root run.
UNIT_NONROOT := daemon/redirect daemon/rpc daemon/workloads daemon/tracing plugin internal/grpccall \
	daemon/policy daemon/events daemon/kubecache daemon/nodetaint daemon/admission daemon/istioadopt daemon/ambientmesh daemon/ambientmesh/internal/hostprobe daemon daemon/cli \
	daemon/podcheck daemon/ambientpods test/harness/controlplane
unit-nonroot:
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && chmod 755 "$$dir" && \
	for p in $(UNIT_NONROOT); do $(GO) test -tags noapiserver -c -o "$$dir/$$(basename $$p).test" ./$$p || exit 1; done && \
	for p in $(UNIT_NONROOT); do \
		echo "as uid 65534: $$p"; \
		(cd $$p && setpriv --reuid 65534 --regid 65534 --clear-groups env HOME="$$dir" PATH="$$PATH" \
			"$$dir/$$(basename $$p).test" -test.count=1 -test.skip '^(TestPluginImportsNoHeavyDependencies|TestPureImportsNoKernel)$$') || exit 1; \
	done

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		out=$$($(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $$pkg 2>&1); rc=$$?; \
		echo "$$out" | tail -3; \
		if [ $$rc -ne 0 ]; then echo "$$out"; exit 1; fi; \
		if echo "$$out" | grep -q 'no fuzz tests to fuzz'; then echo "fuzz target $$name not found in $$pkg" >&2; exit 1; fi; \
	done

bench: containerd kube-apiserver
	$(GO) run ./hack/bench

# `make demo DEMO_ARGS=--keep` leaves it running and prints how to remove it.
demo: prereqs build plugins
	$(GO) run ./hack/demo --bin $(CURDIR)/$(BIN) --plugins $(PLUGINS) $(DEMO_ARGS)

clean:
	rm -rf $(BIN)
