"""Batched BERTScore set-F1 vs the naive way (one bert-score call per proposition pair).

    python benchmarks/set_f1_bench.py                      # 20 squad-open passages, MiniLM, CPU
    python benchmarks/set_f1_bench.py --model roberta-large --num-layers 17 --passages 50
    python benchmarks/set_f1_bench.py --square 100          # one 100 x 100 set pair only

`--square N` (default 100; 0 skips it) first scores one set pair of N predicted x N gold
propositions (N squad-open propositions against the perturbed first 1.5 N, cut to N) with densex
and with bert-score's own batching (`BERTScorer.score` over all N x N pairs in one call, at
each batch size of `--bs-batch-sizes`, the best kept) and prints
`set-F1 NxN: densex / bert-score best = R.RRx` with the largest |dF1|. Predictions are the gold propositions perturbed (every third dropped, light rewording, one
unrelated proposition added), so the scores are realistic rather than all 1.0. Prints the
wall time of each method, the speed-up and the largest per-passage difference in set-F1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from densex.metrics.set_f1 import SetF1Scorer, naive_set_f1, set_scores  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def perturb(props: list[str]) -> list[str]:
    kept = [p for i, p in enumerate(props) if i % 3 != 1]
    return [p.replace("The ", "A ").replace(" was ", " had been ") for p in kept] + [
        "Bananas are rich in potassium."
    ]


def per_passage_bert_score(bert, preds, golds) -> list[tuple[float, float, float]]:
    """bert-score batching all pairs of a passage in one call (its padded greedy matching)."""
    out = []
    for p, g in zip(preds, golds):
        _, _, f = bert.score([a for a in p for _ in g], [b for _ in p for b in g], batch_size=64)
        out.append(set_scores(f.view(len(p), len(g))))
    return out


def square(scorer: SetF1Scorer, golds: list[list[str]], n: int, batch_sizes: list[int]) -> None:
    """One n x n set pair: densex vs bert-score's one call over all pairs, best batch size."""
    flat = [p for g in golds for p in g]
    # gold: n propositions; predictions: the first 1.5 n perturbed (a third dropped), cut to n
    gold, preds = flat[:n], perturb(flat[: n + n // 2 + 1])[:n]
    t = time.perf_counter()
    ours = scorer.score([preds], [gold]).per_passage[0]
    t_ours = time.perf_counter() - t
    best, best_bs, ref = float("inf"), 0, None
    cands, refs = [a for a in preds for _ in gold], [b for _ in preds for b in gold]
    for bs in batch_sizes:
        t = time.perf_counter()
        _, _, f = scorer.bert.score(cands, refs, batch_size=bs)
        dt = time.perf_counter() - t
        print(f"  bert-score one call, batch_size {bs:5d}: {dt:8.2f} s")
        if dt < best:
            best, best_bs, ref = dt, bs, set_scores(f.view(len(preds), len(gold)))
    print(f"  densex: {t_ours:8.2f} s (bert-score best: batch_size {best_bs})")
    print(
        f"set-F1 {len(preds)}x{len(gold)}: densex / bert-score best = {best / t_ours:.2f}x"
        f"   |dF1| {abs(ours['f1'] - ref[2]):.2e}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data", default=os.environ.get("DENSEX_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    )
    ap.add_argument("--passages", type=int, default=20)
    ap.add_argument("--model", default="packaged:minilm")
    ap.add_argument("--num-layers", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--square", type=int, default=100, help="N of the N x N case; 0 = skip")
    ap.add_argument("--bs-batch-sizes", type=int, nargs="+", default=[64, 256, 1024])
    args = ap.parse_args()
    path = Path(args.data) / "squad-open" / "propositions.jsonl"
    if not path.exists():
        sys.exit(f"squad-open propositions not found at {path} (set DENSEX_DATA_DIR)")
    torch.set_num_threads(args.threads)
    with path.open(encoding="utf-8") as f:
        rows = [json.loads(line)["propositions"] for line in f]
    golds = rows[: args.passages]
    preds = [perturb(g) for g in golds]
    n_pairs = sum(len(p) * len(g) for p, g in zip(preds, golds))

    scorer = SetF1Scorer(args.model, num_layers=args.num_layers, lang=None)
    scorer.score(preds[:1], golds[:1])  # warm-up
    if args.square:
        square(scorer, rows[100:], args.square, args.bs_batch_sizes)

    t = time.perf_counter()
    ours = scorer.score(preds, golds)
    t_ours = time.perf_counter() - t

    t = time.perf_counter()
    naive = naive_set_f1(scorer.bert, preds, golds)
    t_naive = time.perf_counter() - t

    t = time.perf_counter()
    batched = per_passage_bert_score(scorer.bert, preds, golds)
    t_batched = time.perf_counter() - t

    diff_naive = max(abs(o["f1"] - n[2]) for o, n in zip(ours.per_passage, naive))
    diff_batched = max(abs(o["f1"] - b[2]) for o, b in zip(ours.per_passage, batched))
    print(f"{args.passages} passages, {n_pairs} proposition pairs, backbone {args.model}")
    print(f"set-F1 {ours.f1:.4f} (P {ours.precision:.4f}, R {ours.recall:.4f})")
    print(f"batched (embed once)           {t_ours:8.2f} s")
    print(
        f"bert-score, one call per pair  {t_naive:8.2f} s   ratio {t_naive / t_ours:6.1f}x   max |dF1| {diff_naive:.2e}"
    )
    print(
        f"bert-score, one call/passage   {t_batched:8.2f} s   ratio {t_batched / t_ours:6.1f}x   max |dF1| {diff_batched:.2e}"
    )


if __name__ == "__main__":
    main()
