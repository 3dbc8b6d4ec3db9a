# nodeplan — every target sets itself up on a fresh machine (Python 3.11 + make).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SNAPSHOT ?= fixtures/snapshots/example.yaml

.PHONY: setup run test bench bench-controller lint clean control-plane browser cluster-up cluster-down crds

$(STAMP): requirements.lock pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (Python 3.11 is required)"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements.lock
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

## Solve the bundled example snapshot with the built-in KWOK catalog and print the plan.
run: $(STAMP)
	$(BIN)/nodeplan solve $(SNAPSHOT) --compare greedy

## The whole test suite (what CI runs), e2e tests on the real control plane included.
test: $(STAMP) control-plane browser dra-cel helm image karpenter-kwok promql
	$(BIN)/python -m pytest -q

## Build helm (helm.sh/helm/v3, pinned in hack/helm/versions.env) if missing, for the chart tests: ~2-3 min cold.
.PHONY: helm
helm:
	@hack/helm/build.sh >/dev/null

## Build the controller image with buildah (vfs, chroot) and smoke-test it; skipped when the inputs are unchanged.
## Cold ~4-6 min (Debian base ~2 min once, image ~2-3 min); needs root (apt, debootstrap, buildah).
.PHONY: image
image: $(STAMP)
	@hack/image/build.sh >/dev/null

## Build the pinned control-plane binaries (etcd, kube-*, kwok) if missing: ~6-8 min cold, 0.1 s warm.
control-plane:
	@hack/control-plane/build.sh >/dev/null

## Build the DRA CEL oracle (Go, k8s.io/dynamic-resource-allocation/cel) if missing: ~2-3 min cold, 0.1 s warm.
.PHONY: dra-cel
dra-cel:
	@hack/dra-cel/build.sh >/dev/null

## Build the PromQL oracle (Go, Prometheus' promql engine, pinned in hack/promql/versions.env) if missing, for the
## dashboard tests: ~1 min cold (53 s measured, module download ~11 s more), 0.1 s warm.
.PHONY: promql
promql:
	@hack/promql/build.sh >/dev/null

## Build Karpenter's KWOK provider (sigs.k8s.io/karpenter/kwok, pinned in bench/karpenter/versions.env) and extract
## its CRDs, if missing, for the e2e Karpenter tests and bench-controller: ~3 min cold, 0.1 s warm.
.PHONY: karpenter-kwok
karpenter-kwok:
	@hack/karpenter-kwok/build.sh >/dev/null

## Debian's chromium for the HTML report's screenshot test, installed only when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || hack/install-chromium.sh

## Start / stop a local control plane (NODEPLAN_CLUSTER_DIR, default /tmp/nodeplan-cluster).
cluster-up: control-plane
	hack/control-plane/cluster.sh up
cluster-down:
	hack/control-plane/cluster.sh down

## Regenerate deploy/crds from the pydantic models (and the chart's copy, deploy/chart/crds).
crds: $(STAMP)
	$(BIN)/python -m controller.crds
	cp deploy/crds/*.yaml deploy/chart/crds/

## Benchmarks: prints the tables (see README); BENCH_ARGS="--sizes 100,1000" / DRA_BENCH_ARGS="--sizes 100" to narrow.
bench: $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)
	$(BIN)/python -m bench.dra $(DRA_BENCH_ARGS)

## nodeplan vs its yardstick vs the real Karpenter scheduler (bench/karpenter, built if missing; not in `make test`).
.PHONY: bench-karpenter
bench-karpenter: $(STAMP)
	@bench/karpenter/build.sh >/dev/null
	$(BIN)/python -m bench.run --karpenter $(BENCH_ARGS)

## Controller scale-out on the real control plane: 1,000 pending pods to all Running (Karpenter's perf bar).
bench-controller: $(STAMP) control-plane karpenter-kwok
	$(BIN)/python -m bench.controller_perf $(BENCH_ARGS)

## Controller cluster state at scale: a synthetic 50,000-pod / 5,000-node cache, then 2,000 KWOK nodes with 20,000
## running pods and a 1,000-pod scale-out on the real control plane (SCALE_ARGS="--offline" or "--live-pods 5000").
.PHONY: bench-scale
bench-scale: $(STAMP) control-plane
	$(BIN)/python -m bench.controller_scale $(SCALE_ARGS)

## Hostile-input fuzzing, long run: 600 random inputs per command (solve, verify, consolidate, diff; 2,400).
.PHONY: fuzz
fuzz: $(STAMP)
	FUZZ_EXAMPLES=600 FUZZ_RANDOM=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/fuzz

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy model solver providers controller cli reports

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
