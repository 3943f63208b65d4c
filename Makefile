# kube-resource-enforcer: the two quick-start commands are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install system-deps bench-deps test test-images lint demo bench proto constraints clean \
	cluster-build cluster-up cluster-down cluster-demo helm-build vm-up vm-exec vm-down

system-deps:
	./.ci/system-deps.sh

# Every version from constraints.txt (PIP_CONSTRAINT: the build backend pip fetches to build the
# project is pinned too). `make constraints` rewrites it from the venv (docs/install.md).
$(STAMP): pyproject.toml constraints.txt
	@$(MAKE) --no-print-directory system-deps
	$(PYTHON) -m venv $(VENV)
	PIP_CONSTRAINT=$(CURDIR)/constraints.txt $(BIN)/pip install -q --upgrade pip
	PIP_CONSTRAINT=$(CURDIR)/constraints.txt $(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

# The cluster's builds and the VM's image come first, so their time shows apart; a failed build
# is reported here and again, as a failure, by the cluster tests (tests/realcluster/) and the VM
# tests (tests/vm/), which never skip. helm (tests/helm/, the chart's install on the cluster) is
# built from its pinned Go module once, then cached: a failed build fails `make test` here.
# The VM's image (mostly downloads and unpacking) is made while the Go builds compile.
test: system-deps install lint
	./tests/beds/vm/build.sh >/dev/null & vm=$$!; \
	./tests/beds/helm.sh >/dev/null || { wait $$vm; echo "make test: the helm build failed" >&2; exit 1; }; \
	./tests/beds/cluster/build.sh >/dev/null || echo "make test: the cluster build failed; the cluster tests will fail" >&2; \
	wait $$vm || echo "make test: the VM image build failed; the VM tests will fail" >&2
	$(BIN)/pytest -q

# Only the image tests (also part of `make test`): both images built with podman on a Debian
# base made locally, then run (docs/testing.md).
test-images: system-deps install
	$(BIN)/pytest -q -m images tests/images

demo: install
	$(BIN)/python -m tests.support.demo

# wrk and Debian's Go toolchain for the Go baselines: for the benchmarks only (bench/README.md).
bench-deps:
	./bench/system-deps.sh

bench: install bench-deps
	$(BIN)/python -m bench

# Regenerates the CRI, NRI, ttrpc, DRA (kubelet plugin, plugin registration), pod-resources and
# (tests only) device-plugin modules from
# proto/ with the generators in tools/ (not in the wheel); tests/test_proto.py,
# tests/test_nri_proto.py and tests/dra/test_dra_proto.py prove the committed ones current.
proto: install
	$(BIN)/python -m tools.generate_cri
	$(BIN)/python -m tools.generate_nri
	$(BIN)/python -m tools.generate_dra
	$(BIN)/python -m tools.generate_podresources

# After `pip install -U ...` in the venv and a green `make test`: pin what it has now.
constraints: install
	$(BIN)/python .ci/constraints.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

# The single-node Kubernetes test bed (docs/testing.md, "The cluster"): upstream programs built
# once and cached by version (tests/beds/cluster/build.sh), our images deployed with deploy/.
MODE    ?= nri
RUNTIME ?= containerd

helm-build:
	./tests/beds/helm.sh >/dev/null

cluster-build: system-deps
	./tests/beds/cluster/build.sh

cluster-up: system-deps install
	$(BIN)/python -m tests.support.cluster up --mode $(MODE) --runtime $(RUNTIME)

cluster-down: install
	$(BIN)/python -m tests.support.cluster down --runtime $(RUNTIME)

cluster-demo: system-deps install
	$(BIN)/python -m tests.support.cluster demo --mode $(MODE) --runtime $(RUNTIME)

# The cgroup v2 test VM (docs/testing.md, "The cgroup v2 VM"): Debian booted by QEMU as 2 sockets
# and 2 NUMA nodes, image built once and cached (tests/beds/vm/build.sh); run folder .vm/.
vm-up: system-deps install
	$(BIN)/python -m tests.support.vm up

vm-exec: install
	@$(BIN)/python -m tests.support.vm exec '$(subst ','\'',$(value CMD))'

vm-down: install
	$(BIN)/python -m tests.support.vm down
