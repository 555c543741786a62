# Baton: the lock sidecar. `make help` lists the targets.

GO        ?= go
# The Go every target builds and tests with, taken from the Go module proxy
# on first use (go.mod's go line is only the oldest Go that compiles Baton):
# Go 1.26.8 carries standard-library vulnerabilities that make vulncheck
# reports on Baton's code paths (net/http, crypto/tls, crypto/x509).
export GOTOOLCHAIN := go1.27.3
BIN       ?= $(CURDIR)/bin
K8S_BIN   ?= $(BIN)/k8s
GOFLAGS   ?=
TEST_FLAGS ?= -race -count=1 -timeout 20m
FUZZTIME  ?= 30s
SOCKET    ?= ./baton.sock
DATA_DIR  ?= ./.baton/etcd
RUN_ARGS  ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_-]+:.*##/ {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# What `baton version` and baton_build_info report.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/baton-dev/baton/internal/version.version=$(VERSION) \
  -X github.com/baton-dev/baton/internal/version.commit=$(COMMIT)

.PHONY: build
build: ## Build bin/baton (every command, the embedded etcd), bin/baton-sidecar (the lean build that runs in pods) and bin/baton-dapr (the lean build with Dapr's lock API).
	$(GO) build $(GOFLAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/baton ./cmd/sidecar
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -tags lean -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/baton-sidecar ./cmd/sidecar
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -tags lean,dapr -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/baton-dapr ./cmd/sidecar

# The image the chart's default values name (its appVersion).
IMAGE      ?= ghcr.io/baton-dev/baton:$(shell awk '/^appVersion:/ {gsub(/"/, "", $$2); print $$2}' charts/baton/Chart.yaml)
ETCD_IMAGE ?= gcr.io/etcd-development/etcd:v3.7.3
IMAGES     := $(BIN)/images

.PHONY: image
image: $(BIN)/image $(K8S_BIN)/etcd $(K8S_BIN)/etcdctl ## Write the images the chart runs as docker-archive tarballs in bin/images (no docker, no registry): Baton as $(IMAGE) (/baton, the lean sidecar, its entrypoint; /baton-dapr, the sidecar of pods that speak Dapr; /baton-controller for the controller), etcd as $(ETCD_IMAGE).
	@mkdir -p $(BIN)/image-root $(IMAGES)
	CGO_ENABLED=0 $(GO) build -trimpath -tags lean -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/image-root/baton ./cmd/sidecar
	CGO_ENABLED=0 $(GO) build -trimpath -tags lean,dapr -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/image-root/baton-dapr ./cmd/sidecar
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/image-root/baton-controller ./cmd/sidecar
	$(BIN)/image -o $(IMAGES)/baton.tar -tag $(IMAGE) -entrypoint /baton -user 65532:65532 \
	  -file /baton=$(BIN)/image-root/baton:0755 -file /baton-dapr=$(BIN)/image-root/baton-dapr:0755 -file /baton-controller=$(BIN)/image-root/baton-controller:0755 \
	  -dir /tmp:1777 -dir /var/run/baton
	$(BIN)/image -o $(IMAGES)/etcd.tar -tag $(ETCD_IMAGE) -env PATH=/usr/local/bin \
	  -file /usr/local/bin/etcd=$(K8S_BIN)/etcd:0755 -file /usr/local/bin/etcdctl=$(K8S_BIN)/etcdctl:0755 -dir /tmp:1777 -dir /var/lib/etcd
	@echo "wrote $(IMAGES)/baton.tar ($(IMAGE)) and $(IMAGES)/etcd.tar ($(ETCD_IMAGE)): docker load -i, or ctr -n k8s.io images import"

.PHONY: docker-image
docker-image: ## Build $(IMAGE) with docker from the Dockerfile, for those who have a docker engine.
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) .

# The image writer, pinned by hack/image/go.mod and built into bin.
$(BIN)/image: hack/image/go.mod hack/image/go.sum hack/image/main.go
	cd hack/image && $(GO) build -o $(BIN)/image .

.PHONY: run
run: build ## Run Baton on an embedded etcd, serving ./baton.sock.
	@echo 'baton: in another terminal: export BATON_SOCKET=$(abspath $(SOCKET)) (then baton run, baton locks and examples/clients find it)'
	$(BIN)/baton serve --socket $(SOCKET) --data-dir $(DATA_DIR) --health-addr 127.0.0.1:8081 $(RUN_ARGS)

# $(call gotest,NAME,ARGS,ENV): go test -json ARGS with ENV set, its
# events kept in bin/NAME.json, what go test would have printed without -v
# written to bin/NAME.log and to standard output (hack/testreport), its
# exit code in bin/NAME.rc.
gotest = { $(3) $(GO) test -json $(2) 2>&1; echo $$? > $(BIN)/$(1).rc; } | tee $(BIN)/$(1).json | $(BIN)/testreport | tee $(BIN)/$(1).log

.PHONY: testreport
testreport:
	@$(GO) build -o $(BIN)/testreport ./hack/testreport

.PHONY: test
test: vet envtest-assets node-assets node-images $(BIN)/helm $(BIN)/promtool $(BIN)/promql-names $(BIN)/baton-last-release prometheus-deps dapr-node python-deps postgres-deps testreport ## Run every test (with -race) against a real embedded etcd and a real kube-apiserver, the coordinator's on the in-memory store and again on etcd, Dapr's Node and Go SDKs against real sidecars, the alerts' promtool unit tests, fuzz seeds and the reliability suite included.
	@mkdir -p $(BIN)
	@# The real node's tests (test/node) mostly wait for kubelet and pods:
	@# they run beside the other packages rather than after them. The
	@# reliability suite, whose faults are timed, starts once they are
	@# done, with the coordinator's tests again on etcd beside it; the count
	@# of the engine's core mutexes (-tags lockcount) before it. Each
	@# one's output follows; any failing fails make test, and each failed
	@# test's errors are printed last, a few lines each (testreport
	@# -summary), where a log cut to its tail still shows them. The node's
	@# tests take about 14 minutes alone and more on a busy machine: they
	@# get 30 to time out in.
	@rm -f $(BIN)/*-test.rc $(BIN)/*-test.json
	export KUBEBUILDER_ASSETS=$(K8S_BIN) HELM=$(BIN)/helm BATON_IMAGES=$(IMAGES) BATON_IMAGE_TOOL=$(BIN)/image BATON_DAPR_NODE=$(DAPR_NODE); \
	( $(call gotest,node-test,$(GOFLAGS) $(TEST_FLAGS) -timeout 30m ./test/node) ) > /dev/null & node=$$!; \
	$(call gotest,rest-test,$(GOFLAGS) $(TEST_FLAGS) $$($(GO) list ./... | grep -v '/test/node$$')); \
	(cd clients/go && $(call gotest,client-go-test,$(GOFLAGS) $(TEST_FLAGS) ./...)); \
	( $(call gotest,coordinator-etcd-test,$(GOFLAGS) $(TEST_FLAGS) ./internal/coordinator,BATON_STORE=etcd) ) > /dev/null & coord=$$!; \
	wait $$node; \
	$(call gotest,lockcount-test,$(GOFLAGS) -count=1 -tags lockcount -run '^TestMutexTakenPerOperation$$' ./internal/coordinator); \
	$(call gotest,e2e-test,$(GOFLAGS) $(TEST_FLAGS) -tags e2e ./test/e2e,BATON_E2E_REPORT=$(BIN)/e2e-report.md BATON_LAST_RELEASE=$(BIN)/baton-last-release); \
	wait $$coord; \
	echo "--- the real node's tests:"; cat $(BIN)/node-test.log; \
	echo "--- the coordinator's tests on etcd:"; cat $(BIN)/coordinator-etcd-test.log; \
	cat $(BIN)/e2e-report.md; \
	failed=; for run in rest client-go node coordinator-etcd lockcount e2e; do test "$$(cat $(BIN)/$$run-test.rc 2>/dev/null)" = 0 || failed="$$failed $$run"; done; \
	if test -z "$$failed"; then echo "make test: every test passed"; else \
	  echo "--- make test failed in:$$failed (each go test run's output is in $(BIN)/*-test.log); each failed test's errors:"; \
	  $(BIN)/testreport -summary $(BIN)/rest-test.json $(BIN)/client-go-test.json $(BIN)/node-test.json $(BIN)/lockcount-test.json $(BIN)/e2e-test.json $(BIN)/coordinator-etcd-test.json; exit 1; fi

.PHONY: test-e2e
test-e2e: $(BIN)/baton-last-release ## Run the reliability suite (S1-S13, S15-S24) and write test/e2e/REPORT.md.
	BATON_LAST_RELEASE=$(BIN)/baton-last-release BATON_E2E_REPORT=$(CURDIR)/test/e2e/REPORT.md $(GO) test $(GOFLAGS) $(TEST_FLAGS) -tags e2e ./test/e2e
	@cat test/e2e/REPORT.md

# The last release's sidecar, built from the commit hack/last-release names
# (git history: a shallow clone is deepened first), outside the tree, for
# the reliability suite's mixed-version scenario.
LAST_RELEASE = $(shell sed -n '/^[0-9a-f]\{40\}$$/p' hack/last-release)
$(BIN)/baton-last-release: hack/last-release
	@git cat-file -e '$(LAST_RELEASE)^{commit}' 2>/dev/null || test ! -f "$$(git rev-parse --git-dir)/shallow" || git fetch --unshallow
	@git cat-file -e '$(LAST_RELEASE)^{commit}' || { echo "the last release's commit '$(LAST_RELEASE)' (hack/last-release) is not in this repository's history: fetch it, or clone the repository whole"; exit 1; }
	@mkdir -p $(BIN)
	set -e; src=$$(mktemp -d); trap 'rm -rf "$$src"' EXIT; \
	git archive --format=tar -o "$$src/src.tar" $(LAST_RELEASE); tar -x -C "$$src" -f "$$src/src.tar"; \
	cd "$$src" && CGO_ENABLED=0 $(GO) build -trimpath \
	  -ldflags '-X github.com/baton-dev/baton/internal/version.version=last-release -X github.com/baton-dev/baton/internal/version.commit=$(LAST_RELEASE)' \
	  -o $@ ./cmd/sidecar

.PHONY: soak
soak: envtest-assets node-assets node-images $(BIN)/helm $(BIN)/baton-last-release ## Run the long reliability suite, S14, then on the test node the chart's etcd under churn and 200 forced failovers of an election (about 90 minutes; not in CI).
	BATON_SOAK=1 BATON_LAST_RELEASE=$(BIN)/baton-last-release BATON_E2E_REPORT=$(BIN)/soak-report.md $(GO) test $(GOFLAGS) -count=1 -timeout 90m -tags e2e ./test/e2e
	@cat $(BIN)/soak-report.md
	export KUBEBUILDER_ASSETS=$(K8S_BIN) HELM=$(BIN)/helm BATON_IMAGES=$(IMAGES) BATON_IMAGE_TOOL=$(BIN)/image; \
	BATON_SOAK=1 $(GO) test $(GOFLAGS) -count=1 -timeout 150m -v -run '^(TestChartEtcdUnderChurn|TestElectionFailovers)$$' ./test/node

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 30s).
	$(GO) test -run '^$$' -fuzz '^FuzzLockName$$' -fuzztime $(FUZZTIME) ./internal/keyspace
	$(GO) test -run '^$$' -fuzz '^FuzzAcquireJSON$$' -fuzztime $(FUZZTIME) ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzHandler$$' -fuzztime $(FUZZTIME) ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzMembers$$' -fuzztime $(FUZZTIME) ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzHTTP$$' -fuzztime $(FUZZTIME) ./internal/dapr

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet, the reliability suite and the lean sidecar build included.
	$(GO) vet ./...
	cd clients/go && $(GO) vet ./...
	$(GO) vet -tags e2e ./test/e2e
	$(GO) vet -tags lean ./cmd/sidecar
	$(GO) vet -tags lean,dapr ./cmd/sidecar

.PHONY: lint
# The full and the lean build hold every file between them (lean,dapr adds
# none, and make vet compiles it).
lint: $(BIN)/golangci-lint ## golangci-lint with .golangci.yml (vet, staticcheck, errcheck, errorlint, doc comments on exported names, ...).
	$(BIN)/golangci-lint run ./...
	cd clients/go && $(BIN)/golangci-lint run ./...
	$(BIN)/golangci-lint run --build-tags lean ./cmd/sidecar

.PHONY: verify
verify: vet lint vulncheck manifests helm-sync node-client-check ## Fail on lint findings, known vulnerabilities on Baton's code paths, gofmt, go.mod or generated-manifest drift (the chart's copies included, and the Node client's dist/).
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt drift: run make fmt"; exit 1; }
	$(GO) mod tidy -diff
	cd clients/go && $(GO) mod tidy -diff
	@test -z "$$(git status --porcelain -- api config charts/baton/crds charts/baton/files)" || { git status --porcelain -- api config charts/baton/crds charts/baton/files; git diff -- api config charts | head -50; echo "generated files drift: run make manifests helm-sync and commit"; exit 1; }

# Code generators, pinned by hack/tools/go.mod and built into bin.
CONTROLLER_GEN ?= $(BIN)/controller-gen

# The tools that type-check Go source (controller-gen, golangci-lint,
# govulncheck) must be built by the Go whose standard library they read: a
# stamp named after GOTOOLCHAIN rebuilds them when it changes.
TOOLCHAIN_STAMP := $(BIN)/.toolchain-$(GOTOOLCHAIN)
$(TOOLCHAIN_STAMP):
	@mkdir -p $(BIN) && rm -f $(BIN)/.toolchain-* && touch $@

$(BIN)/controller-gen: hack/tools/go.mod hack/tools/go.sum $(TOOLCHAIN_STAMP)
	cd hack/tools && $(GO) build -o $(BIN)/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen

.PHONY: manifests
manifests: $(BIN)/controller-gen ## Generate the Lock and LockPolicy CRDs (config/crd), the controller's RBAC (config/rbac) and api deep copies from the code's markers.
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd rbac:roleName=baton-mirror paths=./api/... paths=./internal/mirror/... paths=./internal/policysync/... paths=./internal/access/... paths=./internal/highwater/... \
	  output:crd:dir=config/crd output:rbac:dir=config/rbac

# golangci-lint, pinned by hack/golangci-lint/go.mod and built into bin
# (about two minutes cold).
$(BIN)/golangci-lint: hack/golangci-lint/go.mod hack/golangci-lint/go.sum $(TOOLCHAIN_STAMP)
	cd hack/golangci-lint && $(GO) build -o $(BIN)/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint

# promtool, Prometheus's rules checker and unit test runner, pinned by
# hack/promtool/go.mod and built into bin (about four minutes cold): the
# alerts' tests (test/alerts) run it.
$(BIN)/promtool: hack/promtool/go.mod hack/promtool/go.sum
	cd hack/promtool && $(GO) build -o $(BIN)/promtool github.com/prometheus/prometheus/cmd/promtool

# promql-names: the metric names a PromQL expression selects, by
# Prometheus's own parser (the same module as promtool).
$(BIN)/promql-names: hack/promtool/go.mod hack/promtool/go.sum hack/promtool/promql-names/main.go
	cd hack/promtool && $(GO) build -o $(BIN)/promql-names ./promql-names

# A Prometheus server, Debian's package, for the test that scrapes real
# sidecars and a controller with the alerts and the dashboard's queries
# (test/alerts). The package's service is not started (policy-rc.d).
.PHONY: prometheus-deps
prometheus-deps:
	@command -v prometheus >/dev/null || { echo "installing prometheus"; printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }; rc=$$?; rm -f /usr/sbin/policy-rc.d; exit $$rc; }

# govulncheck, pinned by hack/govulncheck/go.mod and built into bin. Its
# database is the Go vulnerability database as of VULNDB_VERSION, taken as a
# module through the Go module proxy (its data/osv directory is what
# govulncheck reads), so a scan needs no network once the module cache has
# it and gives the same answer on every machine until the pin moves.
VULNDB_VERSION := v0.0.0-20261105234957-e22db6528018
$(BIN)/govulncheck: hack/govulncheck/go.mod hack/govulncheck/go.sum $(TOOLCHAIN_STAMP)
	cd hack/govulncheck && $(GO) build -o $(BIN)/govulncheck golang.org/x/vuln/cmd/govulncheck

.PHONY: vulncheck
vulncheck: $(BIN)/govulncheck ## Fail on a known vulnerability that Baton's code can reach, in its modules or the standard library (govulncheck, database pinned by VULNDB_VERSION).
	@db=$$($(GO) mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	test -d "$$db/data/osv" || { echo "vulncheck: no database at golang.org/x/vulndb@$(VULNDB_VERSION)"; exit 1; }; \
	$(BIN)/govulncheck -db "file://$$db/data/osv" ./...

# Python 3.11 or newer with venv and ensurepip, for the Python client's
# tests (cmd/sidecar TestPythonClient installs it with pip in a fresh
# virtual environment): Debian's packages when missing.
.PHONY: postgres-deps
postgres-deps: ## Install PostgreSQL's server from Debian's packages when missing (the fencing recipes' test starts one of its own; the package's service is not started).
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { echo "installing postgresql"; printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql; }; rc=$$?; rm -f /usr/sbin/policy-rc.d; exit $$rc; }

.PHONY: python-deps
python-deps: ## Install python3 and its venv module from Debian's packages when missing (the Python client's tests).
	@python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { echo "installing python3 python3-venv"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv; }

# Dapr's Node SDK, pinned by test/dapr/node/package-lock.json and installed
# into bin/dapr-node with the driver the tests run it through (Node.js and
# npm from Debian's packages when missing).
DAPR_NODE := $(BIN)/dapr-node

.PHONY: dapr-node
dapr-node: $(DAPR_NODE)/driver.mjs ## Install Dapr's Node SDK (@dapr/dapr) into bin/dapr-node for the Dapr compatibility tests.

$(DAPR_NODE)/.installed: test/dapr/node/package.json test/dapr/node/package-lock.json
	@command -v npm >/dev/null || { echo "installing nodejs npm"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	@mkdir -p $(DAPR_NODE)
	cp test/dapr/node/package.json test/dapr/node/package-lock.json $(DAPR_NODE)/
	cd $(DAPR_NODE) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

$(DAPR_NODE)/driver.mjs: test/dapr/node/driver.mjs $(DAPR_NODE)/.installed
	cp test/dapr/node/driver.mjs $@

# The TypeScript compiler that builds the Node client, pinned by
# hack/tsc/package-lock.json and installed into bin/tsc.
TSC_DIR := $(BIN)/tsc
TSC     := node $(TSC_DIR)/node_modules/typescript/bin/tsc -p clients/node --typeRoots $(TSC_DIR)/node_modules/@types

$(TSC_DIR)/.installed: hack/tsc/package.json hack/tsc/package-lock.json
	@command -v npm >/dev/null || { echo "installing nodejs npm"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	@mkdir -p $(TSC_DIR)
	cp hack/tsc/package.json hack/tsc/package-lock.json $(TSC_DIR)/
	cd $(TSC_DIR) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

.PHONY: node-api
node-api: ## Write the Node client's types of the API (clients/node/src/api.ts) from its OpenAPI document.
	$(GO) run ./hack/tsapi > clients/node/src/api.ts

.PHONY: node-client
node-client: $(TSC_DIR)/.installed ## Build the Node client (clients/node/dist, committed: npm install needs no build) from its TypeScript.
	rm -rf clients/node/dist
	$(TSC)

.PHONY: node-client-check
node-client-check: $(TSC_DIR)/.installed
	@rm -rf $(BIN)/node-client-dist
	$(TSC) --outDir $(BIN)/node-client-dist
	@diff -r clients/node/dist $(BIN)/node-client-dist || { echo "clients/node/dist is not built from clients/node/src: run make node-client and commit"; exit 1; }

# Helm, pinned by hack/helm/go.mod and built into bin (a few minutes cold).
$(BIN)/helm: hack/helm/go.mod hack/helm/go.sum
	cd hack/helm && $(GO) build -o $(BIN)/helm helm.sh/helm/v4/cmd/helm

CHART := charts/baton

.PHONY: helm-sync
helm-sync: ## Copy the generated CRD and RBAC rules into the chart (make verify fails when they differ).
	@mkdir -p $(CHART)/crds $(CHART)/files
	cp config/crd/*.yaml $(CHART)/crds/
	cp config/rbac/role.yaml $(CHART)/files/role.yaml

# The chart's variants: the values files under test/chart/values.
CHART_VARIANTS := $(wildcard test/chart/values/*.yaml)

.PHONY: helm-lint
helm-lint: $(BIN)/helm ## helm lint the chart with its default values and each variant.
	$(BIN)/helm lint --strict $(CHART)
	@for v in $(CHART_VARIANTS); do echo "== $$v"; $(BIN)/helm lint --strict $(CHART) -f $$v || exit 1; done

.PHONY: helm-template
helm-template: $(BIN)/helm ## Render the chart with its default values and each variant into bin/chart.
	@mkdir -p $(BIN)/chart
	$(BIN)/helm template baton $(CHART) --namespace baton > $(BIN)/chart/default.yaml
	@for v in $(CHART_VARIANTS); do $(BIN)/helm template baton $(CHART) --namespace baton -f $$v > $(BIN)/chart/$$(basename $$v) || exit 1; echo "rendered $(BIN)/chart/$$(basename $$v)"; done

# A real kube-apiserver, etcd and kubectl for controller-runtime's envtest,
# built from the Go module proxy into bin/k8s (about 14 minutes cold, seconds
# when the build cache is warm). hack/envtest-assets holds their wrapper modules.
K8S_VERSION ?= v1.37.1
K8S_LDFLAGS := -s -w \
  -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
  -X k8s.io/component-base/version.gitMajor=1 \
  -X k8s.io/component-base/version.gitMinor=37 \
  -X k8s.io/client-go/pkg/version.gitVersion=$(K8S_VERSION)

.PHONY: envtest-assets
envtest-assets: $(K8S_BIN)/kube-apiserver $(K8S_BIN)/kubectl $(K8S_BIN)/etcd ## Build kube-apiserver, kubectl and etcd for the Kubernetes tests into bin/k8s.

# One build for every Kubernetes binary: they share most of their packages.
K8S_CMDS := kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler kube-proxy

$(addprefix $(K8S_BIN)/,$(K8S_CMDS)) &: hack/envtest-assets/kube-apiserver/go.mod hack/envtest-assets/kube-apiserver/go.sum
	@mkdir -p $(K8S_BIN)
	cd hack/envtest-assets/kube-apiserver && CGO_ENABLED=0 $(GO) build -trimpath \
	  -ldflags '$(K8S_LDFLAGS)' -o $(K8S_BIN)/ \
	  $(addprefix k8s.io/kubernetes/cmd/,$(K8S_CMDS))

# The test node: the rest of Kubernetes and CoreDNS, built like the test
# kube-apiserver; containerd, runc and the CNI plugins from Debian.
.PHONY: node-assets
node-assets: $(addprefix $(K8S_BIN)/,$(K8S_CMDS)) $(K8S_BIN)/etcd $(K8S_BIN)/coredns ## Build the test node's Kubernetes binaries and CoreDNS into bin/k8s.

$(K8S_BIN)/coredns: hack/coredns/go.mod hack/coredns/go.sum
	@mkdir -p $(K8S_BIN)
	cd hack/coredns && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(K8S_BIN)/coredns github.com/coredns/coredns

NODE_PACKAGES := containerd runc containernetworking-plugins iptables conntrack socat busybox-static

.PHONY: node-deps
node-deps: ## Install the test node's container runtime from Debian's packages (containerd, runc, CNI plugins, iptables, busybox-static), when missing.
	@missing=$$(for p in $(NODE_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ] && [ "$$(id -u)" != 0 ]; then echo "node-deps: not root, so not installing $$missing; the node tests will be skipped"; \
	elif [ -n "$$missing" ]; then echo "installing $$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

# Where make cluster keeps the node's state and logs (NODE_DIR.log is its
# own output, NODE_DIR.pid its process).
NODE_DIR ?= $(BIN)/node
# node_alive succeeds while make cluster's process runs (a zombie waiting
# for its reaper has ended).
node_alive = [ -f $(NODE_DIR).pid ] && case "$$(sed 's/.*) //' /proc/$$(cat $(NODE_DIR).pid)/stat 2>/dev/null)" in ""|Z*) false;; *) true;; esac

.PHONY: cluster
cluster: node-assets node-images $(BIN)/helm ## Start a one-node Kubernetes on this machine in the background (as root; a local kind), with the chart's images loaded, and print its KUBECONFIG line.
	@$(GO) build -o $(BIN)/cluster ./test/cluster
	@if $(node_alive); then echo "a node runs already: make cluster-down stops it"; exit 1; fi
	@rm -f $(NODE_DIR).ready; setsid $(BIN)/cluster -dir $(NODE_DIR) -bin $(K8S_BIN) -images $(IMAGES) -ready-file $(NODE_DIR).ready > $(NODE_DIR).log 2>&1 & echo $$! > $(NODE_DIR).pid
	@for i in $$(seq 300); do [ -s $(NODE_DIR).ready ] && break; $(node_alive) || { cat $(NODE_DIR).log; exit 1; }; sleep 1; done; \
	[ -s $(NODE_DIR).ready ] || { cat $(NODE_DIR).log; echo "the node is not Ready after 5 minutes: make cluster-down stops it"; exit 1; }
	@echo "export KUBECONFIG=$$(cat $(NODE_DIR).ready)"

.PHONY: cluster-down
cluster-down: ## Stop the node make cluster started and undo its changes to the host.
	@if $(node_alive) && kill -TERM $$(cat $(NODE_DIR).pid); then \
	  for i in $$(seq 120); do $(node_alive) || break; sleep 1; done; \
	  if $(node_alive); then echo "the node is still stopping after 2 minutes (pid $$(cat $(NODE_DIR).pid); its log: $(NODE_DIR).log)"; exit 1; fi; \
	  echo "node stopped"; \
	else echo "no node runs"; fi
	@rm -f $(NODE_DIR).pid $(NODE_DIR).ready

# The node's own images: the pods' sandbox, CoreDNS, the test apps' image
# (busybox and baton), and busybox:1.37 as the examples name it (the node
# reaches no registry), made of Debian's busybox-static.
.PHONY: node-images
node-images: image node-deps $(K8S_BIN)/coredns ## Write the test node's images (pause, CoreDNS, a test app) into bin/images.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/image-root/pause ./internal/testing/kubenode/pause
	$(BIN)/image -o $(IMAGES)/pause.tar -tag docker.io/baton/pause:local -entrypoint /pause -user 65535:65535 \
	  -file /pause=$(BIN)/image-root/pause:0755
	$(BIN)/image -o $(IMAGES)/coredns.tar -tag docker.io/baton/coredns:local -entrypoint /coredns \
	  -file /coredns=$(K8S_BIN)/coredns:0755
	@[ -x /bin/busybox ] || { echo "node-images: no /bin/busybox (make node-deps): no app image, the node tests will be skipped"; exit 0; }; \
	$(BIN)/image -o $(IMAGES)/app.tar -tag docker.io/baton/app:test -env PATH=/bin \
	  -file /bin/busybox=/bin/busybox:0755 $(foreach c,sh sleep echo cat date hostname nslookup wget,-link /bin/$(c)=busybox) \
	  -file /bin/baton=$(BIN)/image-root/baton:0755 -dir /tmp:1777; \
	$(BIN)/image -o $(IMAGES)/busybox.tar -tag docker.io/library/busybox:1.37 -env PATH=/bin \
	  -file /bin/busybox=/bin/busybox:0755 $(foreach c,sh sleep echo cat date hostname nslookup wget kill,-link /bin/$(c)=busybox) \
	  -dir /tmp:1777

$(K8S_BIN)/etcd: hack/envtest-assets/etcd/go.mod hack/envtest-assets/etcd/go.sum hack/envtest-assets/etcd/main.go
	@mkdir -p $(K8S_BIN)
	cd hack/envtest-assets/etcd && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(K8S_BIN)/etcd .

# etcdctl, in the test etcd image as in the official one: the node tests
# attack the chart's etcd with it.
$(K8S_BIN)/etcdctl: hack/envtest-assets/etcdctl/go.mod hack/envtest-assets/etcdctl/go.sum
	@mkdir -p $(K8S_BIN)
	cd hack/envtest-assets/etcdctl && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(K8S_BIN)/etcdctl go.etcd.io/etcd/etcdctl/v3

.PHONY: clean
clean: ## Remove build output and the data of `make run`.
	rm -rf $(BIN) ./.baton $(SOCKET)

.PHONY: bench
bench: build envtest-assets ## Measure Baton against raw etcd, etcd's Mutex and Redis (when installed), and its elections' failover against client-go's leader election on a kube-apiserver: about 9 minutes.
	$(GO) build $(GOFLAGS) -o $(BIN)/bench ./test/bench
	KUBEBUILDER_ASSETS=$(K8S_BIN) $(BIN)/bench --baton $(BIN)/baton --sidecar $(BIN)/baton-sidecar --dapr-sidecar $(BIN)/baton-dapr $(BENCH_ARGS)

# The scale-out step's sizes: sidecars in one scope on one etcd.
SCALE_OUT ?= 10,100,1000,1000/10

.PHONY: bench-scale-out
bench-scale-out: ## Run make bench's scale-out step alone, for SCALE_OUT sidecars (default 10,100,1000,1000/10: N/P is N sidecars through P of etcd's gRPC proxies; e.g. SCALE_OUT=3000).
	$(GO) build $(GOFLAGS) -o $(BIN)/bench ./test/bench
	$(BIN)/bench --only scale-out --scale-out $(SCALE_OUT)

.PHONY: bench-deps
bench-deps: ## Install redis-server from Debian's packages, the reference make bench compares with.
	@command -v redis-server >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; }
