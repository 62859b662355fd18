#!/usr/bin/env bash
# One-time set-up: a virtual environment in .venv with densex and its extras.
# On a machine without a GPU we install the CPU wheel torch==2.13.0 first, so that no
# dependency resolves torch to a multi-GB CUDA build. With a GPU (nvidia-smi present) or a
# torch already importable in $DENSEX_PYTHON's environment, the user's torch is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${DENSEX_EXTRAS:-demo,dev,llm,serve,langchain}"
if [ -n "${DENSEX_PYTHON:-}" ]; then
  PY="$DENSEX_PYTHON"
else
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
  fi
  PY=.venv/bin/python
fi
stamp=.venv/.densex-installed
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16) $EXTRAS"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -z "${DENSEX_PYTHON:-}" ]; then
  exit 0
fi
"$PY" -m pip install -q --upgrade pip
if ! "$PY" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    "$PY" -m pip install -q torch
  else
    "$PY" -m pip install -q "torch==2.13.0"
  fi
fi
"$PY" -m pip install -q -e ".[${EXTRAS}]"
[ -z "${DENSEX_PYTHON:-}" ] && echo "$want" > "$stamp"
echo "densex installed in $("$PY" -c 'import sys; print(sys.prefix)')"
