# The two commands of the README. Both do all set-up on a fresh machine.
PY := .venv/bin/python
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export WANDB_MODE ?= disabled
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup demo test test-slow lint bench clean

setup:
	bash scripts/setup.sh

demo: setup
	$(PY) evaluate.py -m experiment=demo

test: setup
	$(PY) -m pytest -q

test-slow: setup
	$(PY) -m pytest -q -m slow

lint: setup
	$(PY) -m ruff check src tests benchmarks scripts *.py
	$(PY) -m ruff format --check src tests benchmarks scripts *.py
	PYTHONPATH=src .venv/bin/lint-imports --no-cache
	$(PY) scripts/long_functions.py --check src

bench: setup
	for f in benchmarks/*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf .cache logs outputs multirun
