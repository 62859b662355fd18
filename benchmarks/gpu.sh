#!/usr/bin/env bash
# The device-machine measurements in one prepared run (< 8 min on one GPU): MiniLM and a
# GTR-base-shaped encoder in fp16/bf16, faiss GPU exact search over 4M x 768 fp16 vectors, and
# Flan-T5-large-shaped propositionizer training steps at batch 64 in bf16 (tokens/s, peak
# memory, MFU), then its generation throughput (transformers bf16 vs CTranslate2 bf16, batch 64:
# benchmarks/propositionizer_speed.py --gpu). Random weights where the real ones are not on the
# machine: nothing is downloaded.
#
#   benchmarks/gpu.sh                 # on the device machine
#   benchmarks/gpu.sh --tiny          # toy shapes on any machine (what tests/test_benchmarks.py runs)
#   PYTHON=/path/to/python benchmarks/gpu.sh --parts search --units 1000000
#
# Extra arguments go to benchmarks/gpu_bench.py (--help lists them). The whole run is limited
# to GPU_BENCH_TIMEOUT seconds (default 480).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-.venv/bin/python}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
timeout "${GPU_BENCH_TIMEOUT:-480}" "$PY" benchmarks/gpu_bench.py "$@"
# the Flan-T5-large propositionizer's throughput (random weights of its shape, forced lengths,
# batch 64): transformers bf16 vs CTranslate2 bf16, with FactoidWiki GPU-hours; on a GPU only
if [[ " $* " != *" --tiny "* ]] && "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  timeout "${GPU_PROP_TIMEOUT:-300}" "$PY" benchmarks/propositionizer_speed.py --gpu --batch 64
fi
