# Two entry points on a fresh clone: `make plan` and `make test`.
# Both create .venv when it is missing. Override TORCH_INDEX_URL (and TORCH_SPEC for another version)
# to install a CUDA build, e.g.
#   make plan TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# SkyPilot's own loader for tests/test_launch_skypilot.py, in a venv of its own (see `skypilot` below).
SKY_VENV ?= .venv-skypilot
SKYPILOT_VERSION ?= 0.14.1
SKY_STAMP := $(SKY_VENV)/.skypilot-$(SKYPILOT_VERSION)

.PHONY: plan test lint env clean chromium skypilot

env: $(STAMP) $(SKY_STAMP)

# torch comes from pip (its configuration finds the CPU build on disk); uv then installs the rest in seconds
# instead of pip's minute and a half, with torch held at what was just installed (a constraint: a package that
# wanted another torch fails the resolution instead of fetching one). uv reads none of pip's configuration, so
# where it cannot reach its index, pip installs the same. Both write bytecode at install time (pip does by
# default, uv with --compile-bytecode): under PYTHONDONTWRITEBYTECODE (CI's) every process would otherwise compile
# transformers and deepspeed anew.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
	$(PY) -c "from importlib.metadata import version; print('torch==' + version('torch'))" > $(VENV)/torch-constraint.txt
	( $(PY) -m pip install --quiet uv && \
	  $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) --constraint $(VENV)/torch-constraint.txt -e ".[test]" ) || \
	  $(PY) -m pip install --quiet -e ".[test]"
	@$(MAKE) --no-print-directory chromium
	@touch $(STAMP)

# tests/test_report.py loads the report page in a headless Chromium: Debian's package, installed when this runs
# as root on a machine with apt-get and no chromium yet. Never fatal: without it those checks skip, saying why.
chromium:
	@if command -v chromium >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then :; \
	elif (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1; then \
	  echo "installed chromium (tests/test_report.py's headless browser)"; \
	else echo "note: chromium could not be installed; tests/test_report.py's browser checks will skip"; fi

# SkyPilot (the [skypilot] extra) pins click below 8.2 and brings some 100 packages, so it stays out of .venv:
# tests/test_launch_skypilot.py loads each emitted skypilot.yaml with SkyPilot's own loader (sky.Task.from_yaml)
# by running $(SKY_VENV)/bin/python, a venv that holds skypilot==$(SKYPILOT_VERSION) (the release whose schemas
# tests/data/skypilot/ stores) and nothing of ours. uv installs it from its index in some 10 s; one `import sky`
# then writes the bytecode of what the loader imports (a few seconds; compiling all of its packages would take a
# minute), with HOME in a temporary folder and SkyPilot's usage report off. Never fatal: where it cannot be
# installed, the reason is kept in $(SKY_VENV)/install-failed.txt and that test skips, quoting it. `make skypilot`
# rebuilds it alone (as does a new SKYPILOT_VERSION).
skypilot:
	@rm -rf $(SKY_VENV)
	@$(MAKE) --no-print-directory $(SKY_STAMP)

$(SKY_STAMP): | $(STAMP)
	@rm -rf $(SKY_VENV); log=$$(mktemp); home=$$(mktemp -d); \
	if { test -x $(VENV)/bin/uv || { echo "uv is not in $(VENV)" >$$log; false; }; } && \
	  $(VENV)/bin/uv venv --quiet --no-python-downloads --python $(PYTHON) $(SKY_VENV) >$$log 2>&1 && \
	  $(VENV)/bin/uv pip install --quiet --python $(SKY_VENV)/bin/python "skypilot==$(SKYPILOT_VERSION)" >>$$log 2>&1 && \
	  env -u PYTHONDONTWRITEBYTECODE HOME=$$home SKYPILOT_DISABLE_USAGE_COLLECTION=1 \
	    $(SKY_VENV)/bin/python -c "import sky" >>$$log 2>&1; then \
	  echo "installed skypilot==$(SKYPILOT_VERSION) in $(SKY_VENV) (tests/test_launch_skypilot.py's SkyPilot loader)"; \
	else rm -rf $(SKY_VENV); mkdir -p $(SKY_VENV); \
	  { echo "skypilot==$(SKYPILOT_VERSION) could not be installed in $(SKY_VENV) by make env:"; tail -n 5 $$log; } \
	    >$(SKY_VENV)/install-failed.txt; \
	  echo "note: skypilot==$(SKYPILOT_VERSION) could not be installed in $(SKY_VENV) (its reason is in"; \
	  echo "  $(SKY_VENV)/install-failed.txt); tests/test_launch_skypilot.py's SkyPilot loader check will skip"; \
	fi; rm -rf $$log $$home; touch $(SKY_STAMP)

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
# shared fixtures (trained run folders) are built once, in the order tests/conftest.py gives (files with
# slow tests first; xdist would otherwise sort files by test count), one torch thread per worker (as each rank
# of the multi-rank tests has: two workers of two threads each would contend for two cores);
# TEST_WORKERS=0 runs it in this process. The 15 slowest tests are listed at the end: CI's budget is 12 minutes.
# Multi-rank test jobs fork their ranks from a warm interpreter under torchrun's own agent (tests/warm_launch.py;
# TESTS_COLD_LAUNCH=1 starts every one cold).
TEST_WORKERS ?= 2
# Bytecode for our own packages, and for the tests and tutorial scripts the ranks import, first: under
# PYTHONDONTWRITEBYTECODE (CI sets it) each of the suite's hundreds of processes would compile them again.
test: lint $(SKY_STAMP)
	$(PY) -m compileall -q -j 0 planner backends hardware_selector_cli benchmarks_db benchmarks scripts tests docs/tutorial/code hardware_selector.py run_training_benchmark.py
	SKY_VENV=$(SKY_VENV) $(if $(filter 0,$(TEST_WORKERS)),,OMP_NUM_THREADS=1) $(PY) -m pytest -q --durations=15 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

clean:
	rm -rf $(VENV) $(SKY_VENV)
