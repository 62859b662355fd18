# The two commands of the README. Both do all set-up on a fresh machine.
PY := .venv/bin/python
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export WANDB_MODE ?= disabled
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup demo test test-slow test-slurm lint docs bench clean

setup:
	bash scripts/setup.sh

demo: setup
	$(PY) evaluate.py -m experiment=demo

# two workers on the 2-core CI machine (pytest-xdist; one test file per worker, so a module's
# fixtures are built once), files handed out heaviest first (tests/conftest.py HEAVY_FIRST);
# `pytest -q` alone runs the same tests in one process
test: setup
	$(PY) -m pytest -q -n auto --dist loadfile --no-loadscope-reorder --durations=15

test-slow: setup
	$(PY) -m pytest -q -m slow

# the cluster steps of docs/cluster.md on a one-machine SLURM (brought up first; root: apt, daemons)
test-slurm: setup
	bash scripts/slurm_local.sh up
	SLURM_CONF=$${DENSEX_SLURM_DIR:-/tmp/densex-slurm}/slurm.conf $(PY) -m pytest -q -s -m slurm

lint: setup
	$(PY) -m ruff check src tests benchmarks scripts *.py
	$(PY) -m ruff format --check src tests benchmarks scripts *.py
	PYTHONPATH=src .venv/bin/lint-imports --no-cache
	$(PY) scripts/long_functions.py --check src
	$(PY) scripts/config_imports.py --check src/densex

# the documentation site (mkdocs.yml, docs/): a strict build fails on a broken link or anchor;
# the `docs` extra is installed on first use
docs: setup
	$(PY) -c "import mkdocs, material" 2>/dev/null || $(PY) -m pip install -q -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

bench: setup
	for f in benchmarks/*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf .cache logs outputs multirun site
