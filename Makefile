# The two commands a new user runs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test test-full test-kernels bench install clean docs

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

run: install
	$(BIN)/pksim whatif -o pksim-out/default --force

# One pytest-xdist worker per core, each test file whole on one of them: a file's module
# fixtures (its nvcc builds, a fit, the default study) are made once.
test: install
	$(BIN)/python -m pytest -q -n auto --dist loadfile

# Everything: the exhaustive variants (marked `exhaustive`) and the full kernel matrix.
test-full: install
	PKSIM_SUITE=full PKSIM_KERNEL_MATRIX=full $(BIN)/python -m pytest -q -n auto --dist loadfile

test-kernels: install
	PKSIM_KERNEL_MATRIX=full $(BIN)/python -m pytest -q tests/codegen tests/kernels

bench: install
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# Re-run every example of README.md and docs/guide/*.md; rewrite their outputs and images.
docs: install
	$(BIN)/python docs/run_examples.py
