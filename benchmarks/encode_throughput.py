"""Encoding throughput (units/s): densex's Lightning encoder vs plain SentenceTransformer.encode.

    .venv/bin/python benchmarks/encode_throughput.py --n 2000 --threads 1
    .venv/bin/python benchmarks/encode_throughput.py --retriever gtr --accelerator gpu --n 20000
    .venv/bin/python benchmarks/encode_throughput.py retriever.runtime=onnx retriever.quantize=int8

Trailing arguments are Hydra overrides of the retriever group, composed as `index.py` composes
them (`densex.pipelines.compose.group_config`). Prints both rates and their ratio (the cost or gain of Lightning + sharding + length sorting).
Reads the first N squad-open passages from the shared data (never copied into the repo).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--retriever", default="minilm")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--accelerator", default="cpu")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--shard-size", type=int, default=50_000)
    ap.add_argument("--skip-reference", action="store_true", help="only the densex encoder")
    ap.add_argument("overrides", nargs="*", help="retriever overrides, e.g. retriever.runtime=onnx")
    ap.add_argument(
        "--data",
        default=os.environ.get("DENSEX_DATA_DIR", str(REPO.parent / "shared" / "data")),
    )
    args = ap.parse_args()

    import torch

    from densex.pipelines.compose import group_config
    from densex.pipelines.edge import retriever_spec
    from densex.retrieval.encode import encode_units_to_dir
    from densex.retrieval.encoders import build_retriever, format_units
    from densex.utils.io import read_jsonl, write_jsonl

    torch.set_num_threads(args.threads)
    cfg = retriever_spec(  # the spec evaluate.py's pipeline would build from the group
        group_config(
            "retriever", args.retriever, f"retriever.batch_size={args.batch_size}", *args.overrides
        )
    )
    passages = Path(args.data) / "squad-open" / "passages.jsonl"
    units = [u for _, u in zip(range(args.n), read_jsonl(passages))]
    with tempfile.TemporaryDirectory() as tmp:
        units_path = Path(tmp) / "units.jsonl"
        write_jsonl(units_path, units)
        trainer = {
            "accelerator": args.accelerator,
            "devices": args.devices,
            "enable_progress_bar": False,
        }
        if args.devices > 1:
            trainer["strategy"] = "ddp_spawn" if args.accelerator == "cpu" else "ddp"
        t0 = time.perf_counter()
        store = encode_units_to_dir(
            units_path, cfg, Path(tmp) / "emb", trainer, shard_size=args.shard_size
        )
        dt = time.perf_counter() - t0
        ours = len(store) / dt
        print(
            f"densex encode_units_to_dir: {len(store)} units in {dt:.1f}s = {ours:.1f} units/s "
            f"(wall, incl. model load; manifest: {store.manifest['units_per_second']} units/s "
            f"for the encode stage) [{args.retriever}, threads={args.threads}, "
            f"batch={args.batch_size}, {args.accelerator} x{args.devices}]"
        )
        if args.skip_reference or cfg.backend != "sentence-transformers":
            return
        from sentence_transformers import SentenceTransformer

        from densex.utils.models import resolve_model

        device = "cuda" if args.accelerator == "gpu" else "cpu"
        st = SentenceTransformer(resolve_model(cfg.query_model), device=device)
        spec = build_retriever(cfg).spec
        texts = format_units(spec, units)
        t0 = time.perf_counter()
        st.encode(texts, batch_size=args.batch_size)
        ref = len(texts) / (time.perf_counter() - t0)
        print(f"SentenceTransformer.encode: {ref:.1f} units/s (model already loaded)")
        print(f"ratio densex/ST (encode stage): {store.manifest['units_per_second'] / ref:.2f}")


if __name__ == "__main__":
    main()
