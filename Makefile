# OffPolicy Lab. `make demo` runs the whole stack on embedded defaults; `make test` runs the suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: demo test test-fast venv deps test-deps clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Installed-marker files make a second `make` instant while still noticing edited requirements.
$(VENV)/.deps: $(PY) requirements.txt requirements-trainer.txt requirements-nodeps.txt
	$(PIP) install --quiet -r requirements.txt
	$(PIP) install --quiet --no-deps -r requirements-nodeps.txt
	touch $@

$(VENV)/.test-deps: $(VENV)/.deps requirements-test.txt
	$(PIP) install --quiet -r requirements-test.txt
	touch $@

venv deps: $(VENV)/.deps
test-deps: $(VENV)/.test-deps

demo: $(VENV)/.deps
	bash scripts/demo.sh

test: $(VENV)/.test-deps
	bash scripts/test.sh

# Unit tests only: no Slurm, no browser, no worker.
test-fast: $(VENV)/.test-deps
	$(PY) -m pytest -m "not slurm and not browser and not integration and not gpu" -q

clean:
	rm -rf var/runs var/local-jobs
