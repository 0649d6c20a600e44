# Two entry points on a fresh clone: `make plan` and `make test`.
# Both create .venv when it is missing. Override TORCH_SPEC (and TORCH_INDEX_URL)
# to install a CUDA build, e.g.
#   make plan TORCH_SPEC=torch TORCH_INDEX_URL=https://download.pytorch.org/whl/cu124
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: plan test lint env clean

env: $(STAMP)

# --no-compile: Python compiles what is imported on first use instead of every file of every package
# at install time (a minute less set-up on 2 cores).
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-compile "$(TORCH_SPEC)" $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
	$(PY) -m pip install --quiet --no-compile -e ".[test]"
	@touch $(STAMP)

# The main job: a real plan for a real catalog model on a cluster you may not have yet.
PLAN_ARGS ?= --model llama-3-8b --gpu H100-80GB --gpus-per-node 8 --nodes 2 --global-batch 512 --seq-len 4096

plan: $(STAMP)
	$(VENV)/bin/hardware-selector plan $(PLAN_ARGS)

# Guard rails first (seconds), then the suite. The rule sets are in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The suite on TEST_WORKERS processes (pytest-xdist), a test file per worker at a time so that a file's
# shared fixtures (trained run folders) are built once; TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2
test: lint
	$(PY) -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

clean:
	rm -rf $(VENV)
