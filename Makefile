# kube-resource-enforcer: the two quick-start commands are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install system-deps test lint demo bench proto clean

system-deps:
	./.ci/system-deps.sh

$(STAMP): pyproject.toml
	@$(MAKE) --no-print-directory system-deps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

test: install lint
	$(BIN)/pytest -q

demo: install
	$(BIN)/python -m tests.support.demo

bench: install
	$(BIN)/python -m bench

# Regenerates the CRI modules from proto/; tests/test_proto.py proves the committed ones are current.
proto: install
	$(BIN)/python -m enforcer.cri.generate

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
