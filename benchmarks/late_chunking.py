"""Encoding cost of late chunking: sentences encoded alone vs pooled from their passage.

    .venv/bin/python benchmarks/late_chunking.py --n 500 --threads 2
    .venv/bin/python benchmarks/late_chunking.py --retriever gtr --accelerator gpu --n 5000
    .venv/bin/python benchmarks/late_chunking.py retriever.runtime=onnx

The first N squad-open passages (read from the shared data, never copied into the repo) are
cut into sentence units by densex's own units stage; the same units are then encoded twice by
densex's Lightning encoder (`encode_units_to_dir`), each timed `--repeats` times (best kept):
as today (one input per sentence) and with `retriever.late_chunking=true` (one input window
per passage, each sentence mean-pooled from its span). Prints units/s, forward inputs per
passage (sequences through the encoder) and real tokens per passage for both, and the late /
alone ratios side by side. Trailing arguments are Hydra overrides of the retriever group.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


def _inputs(spec, units_path: Path) -> tuple[int, int, int]:
    """(units, encoder inputs, real tokens) of one encoding of `units_path`, counted by the
    tokenisation the encoder runs (`retrieval.encode_data` / `retrieval.late_data`)."""
    from densex.retrieval.encode_data import ShardTexts, _Collate
    from densex.retrieval.encoders import load_encoder
    from densex.retrieval.late_data import LateShardTexts
    from densex.utils.shards import plan_shards

    enc = load_encoder(spec, "doc")
    with tempfile.TemporaryDirectory() as tmp:
        cls = LateShardTexts if spec.late_chunking else ShardTexts
        texts, collate = cls(units_path, spec, enc, Path(tmp)), _Collate(enc)
        from densex.corpus.units import unit_tables

        n = len(unit_tables(units_path)[1])
        seqs = tokens = 0
        for shard in plan_shards(n, n):
            for batch in texts.batches(shard, spec.batch_size):
                feats = collate(batch)
                seqs += int(feats["input_ids"].shape[0])
                tokens += int(feats["attention_mask"].sum())
    return n, seqs, tokens


def _time(spec, units_path: Path, trainer: dict, repeats: int) -> float:
    """Best seconds of `repeats` full encodings (a fresh directory each time)."""
    from densex.retrieval.encode import encode_units_to_dir

    best = float("inf")
    for _ in range(repeats):
        out = Path(tempfile.mkdtemp())
        try:
            t0 = time.perf_counter()
            encode_units_to_dir(units_path, spec, out, trainer, shard_size=1_000_000)
            best = min(best, time.perf_counter() - t0)
        finally:
            shutil.rmtree(out, ignore_errors=True)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--retriever", default="minilm")
    ap.add_argument("--n", type=int, default=500, help="passages")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--accelerator", default="cpu")
    ap.add_argument("overrides", nargs="*", help="retriever overrides, e.g. retriever.runtime=onnx")
    ap.add_argument(
        "--data", default=os.environ.get("DENSEX_DATA_DIR", str(REPO.parent / "shared" / "data"))
    )
    args = ap.parse_args()

    import dataclasses

    import torch

    from densex.corpus.units import build_units
    from densex.pipelines.compose import group_config
    from densex.pipelines.edge import corpus_spec, retriever_spec
    from densex.utils.io import read_jsonl, write_jsonl

    torch.set_num_threads(args.threads)
    alone = retriever_spec(group_config("retriever", args.retriever, *args.overrides))
    alone = dataclasses.replace(alone, late_chunking=False)
    late = dataclasses.replace(alone, late_chunking=True)
    trainer = {"accelerator": args.accelerator, "devices": 1, "enable_progress_bar": False}
    passages = Path(args.data) / "squad-open" / "passages.jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        write_jsonl(Path(tmp) / "p.jsonl", [p for _, p in zip(range(args.n), read_jsonl(passages))])
        corpus = corpus_spec({"name": "late-bench", "passages": str(Path(tmp) / "p.jsonl"),
                              "granularities": ["passage", "sentence"]})  # fmt: skip
        units = build_units(corpus, Path(tmp) / "units")["sentence"]
        rows = {}
        for name, spec in (("sentence", alone), ("sentence, late", late)):
            n, seqs, tokens = _inputs(spec, units)
            seconds = _time(spec, units, trainer, args.repeats)
            rows[name] = (n / seconds, seqs / args.n, tokens / args.n, seconds)
    _print(args, n, rows)


def _print(args: argparse.Namespace, n_units: int, rows: dict) -> None:
    print(f"{args.retriever}: {n_units} sentence units of {args.n} squad-open passages, "
          f"{args.threads} threads, {args.accelerator}, best of {args.repeats}")  # fmt: skip
    print(f"{'':16s} {'units/s':>9s} {'inputs/passage':>15s} {'tokens/passage':>15s} {'s':>8s}")
    for name, (ups, seqs, toks, sec) in rows.items():
        print(f"{name:16s} {ups:9.1f} {seqs:15.2f} {toks:15.1f} {sec:8.2f}")
    (a, sa, ta, _), (b, sb, tb, _) = rows.values()
    print(f"{'late / alone':16s} {b / a:8.2f}x {sb / sa:14.2f}x {tb / ta:14.2f}x")


if __name__ == "__main__":
    main()
