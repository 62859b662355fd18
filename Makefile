# The two commands of the README. Both do all set-up on a fresh machine: into .venv, or into
# the interpreter DENSEX_PYTHON names (scripts/setup.sh), which every target then runs.
PY := $(or $(DENSEX_PYTHON),.venv/bin/python)
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
# `pytest -q` alone runs the same tests in one process. Bytecode caches are written even where
# PYTHONDONTWRITEBYTECODE is set (__pycache__/, ignored by git): otherwise every run compiles
# densex and the tests' modules again, and rewrites the asserts of ~90 test modules, in each worker
test: setup
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -n auto --dist loadfile --no-loadscope-reorder --durations=15

test-slow: setup
	$(PY) -m pytest -q -m slow

# the cluster steps of docs/cluster.md on a one-machine SLURM (brought up first; root: apt, daemons)
test-slurm: setup
	bash scripts/slurm_local.sh up
	SLURM_CONF=$${DENSEX_SLURM_DIR:-/tmp/densex-slurm}/slurm.conf $(PY) -m pytest -q -s -m slurm

lint: setup
	$(PY) -m ruff check src tests benchmarks scripts *.py
	$(PY) -m ruff format --check src tests benchmarks scripts *.py
	PYTHONPATH=src $(PY) -c 'import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())' --no-cache
	$(PY) scripts/long_functions.py --check src
	$(PY) scripts/config_imports.py --check src/densex

# the documentation site (mkdocs.yml, docs/): a strict build fails on a broken link or anchor;
# the `docs` extra is installed on first use
docs: setup
	$(PY) -c "import mkdocs, material" 2>/dev/null || $(PY) -m pip install -q -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# every benchmark, one after another, with the arguments its page or docstring documents
# (tests/test_docs.py checks that each parses them). Their times are on their pages. Not run
# here: benchmarks/gpu_bench.py (`bash benchmarks/gpu.sh` on a GPU machine) and
# benchmarks/st_encode.py (run by peers.py in the environments of benchmarks/peer_envs.sh).
# Without --student, propositionizer_speed.py times an untrained copy LM (speed only); open_cost.py
# builds the demo indexes its first run lacks, so it runs twice; haystack_search.py reads the
# sentence index `python evaluate.py -m experiment=squad-train` leaves (built first if missing).
bench: setup
	$(PY) benchmarks/set_f1_bench.py
	$(PY) benchmarks/encode_throughput.py --n 2000 --threads 1
	$(PY) benchmarks/hash_retriever.py --threads 1
	$(PY) benchmarks/late_chunking.py --n 500 --repeats 2
	$(PY) benchmarks/open_cost.py --cache-dir .cache corpus=demo dataset=demo
	$(PY) benchmarks/open_cost.py --cache-dir .cache corpus=demo dataset=demo
	$(PY) benchmarks/serve_load.py --cache-dir .cache
	$(PY) benchmarks/peers.py
	$(PY) benchmarks/propositionizer_speed.py
	$(PY) benchmarks/propositionizer_probe.py --steps 60 --batch 16 --generate copy@1e-4 prefix@1e-4 3e-4@3@fp32@self
	$(PY) benchmarks/scale.py
	$(PY) benchmarks/haystack_search.py

clean:
	rm -rf .cache logs outputs multirun site
