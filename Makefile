# jobfleet — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin:$(CURDIR)/node_modules/.bin

.PHONY: test test-unit test-integration lint typecheck build bench chaos demo control-plane clean deps crds

node_modules: package-lock.json
	npm ci
	@touch node_modules

deps: node_modules

## test: everything — unit and integration suites on real RabbitMQ, PostgreSQL and kube-apiserver
test: node_modules control-plane
	vitest run

## test-unit: pure logic only, no services, seconds
test-unit: node_modules
	vitest run --project unit

test-integration: node_modules control-plane
	vitest run --project integration

lint: node_modules
	eslint .
	prettier --check .

typecheck: node_modules
	tsc -p tsconfig.json

build: node_modules
	tsc -p tsconfig.build.json

## crds: regenerate crds/ from the zod schema in src/api/ (a unit test fails when they drift)
crds: node_modules
	node --import tsx src/api/write-crds.ts

## control-plane: build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and helm
## from the Go module proxy into .cache/kube/<version>/ (once; skipped when KUBEBUILDER_ASSETS is set)
control-plane:
	@if [ -n "$$KUBEBUILDER_ASSETS" ]; then echo "using KUBEBUILDER_ASSETS=$$KUBEBUILDER_ASSETS"; \
	else bash test/ground/build-control-plane.sh >/dev/null; fi

## bench: benchmarks into bench/RESULTS.md (BENCH=worker runs one)
bench: node_modules
	node --import tsx bench/run.ts

## chaos: the soak — 10,000 jobs, 3 workers SIGKILLed at random, a broker drop, a PostgreSQL
## backend termination; verify must pass; twice; figures into bench/RESULTS.md (minutes)
chaos: node_modules
	node --import tsx bench/chaos.ts --write $(CHAOS_ARGS)

## demo: the main job end to end on this machine — control plane, operator, example JobWorker,
## real worker processes; scales on age, rolls back drain-first, blocks a key-rule change (~3 min)
demo: node_modules control-plane
	node --import tsx examples/demo/demo.ts

clean:
	rm -rf dist test-results coverage .cache/build
