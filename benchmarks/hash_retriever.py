"""`retriever=hash`: encoding speed (units/s, one core) and passage recall@k on squad-open.

    PYTHONPATH=src .venv/bin/python benchmarks/hash_retriever.py --threads 1
    PYTHONPATH=src .venv/bin/python benchmarks/hash_retriever.py --dims 256 4096 --questions 0

Speed: `HashEncoder.tokenize` + `forward` (what the Lightning encoder runs per batch) over every
squad-open proposition as "title proposition", in CPU seconds of this process (robust to a
shared machine; with --threads 1 that is units/s per core). Recall: squad-open passages and the first
`--questions` questions (0 = all), exact inner-product search (faiss IndexFlatIP), DPR
has_answer; next to it the exact recall of a uniformly random ranking, and how many top-k lists
change when the passage vectors are stored as float16. Reads the shared data, never copies it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _read(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def random_recall(n_pos: np.ndarray, n: int, k: int) -> float:
    """Mean over questions of P(a random k-subset of n passages holds one of n_pos answers)."""
    from scipy.special import gammaln

    def log_comb(a: np.ndarray, b: int) -> np.ndarray:
        return gammaln(a + 1) - gammaln(b + 1) - gammaln(a - b + 1)

    neg = n - n_pos
    miss = np.where(neg >= k, np.exp(log_comb(neg, k) - log_comb(np.array(n), k)), 0.0)
    return float(np.mean(1.0 - miss))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dims", type=int, nargs="+", default=[256, 4096])
    ap.add_argument("--questions", type=int, default=300, help="first N questions; 0 = all")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--ks", type=int, nargs="+", default=[5, 20, 100])
    ap.add_argument(
        "--data",
        default=os.environ.get("DENSEX_DATA_DIR", str(REPO.parent / "shared" / "data")),
    )
    args = ap.parse_args()

    import faiss
    import torch

    from densex.metrics.answers import has_answer
    from densex.retrieval.hashing import HashEncoder

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    root = Path(args.data) / "squad-open"
    passages = _read(root / "passages.jsonl")
    titles = {p["id"]: p["title"] for p in passages}
    props = [
        f"{titles[r['id']]} {p}"
        for r in _read(root / "propositions.jsonl")
        for p in r["propositions"]
    ]
    questions = _read(root / "questions.jsonl")
    if args.questions:
        questions = questions[: args.questions]

    def encode(enc: HashEncoder, texts: list[str]) -> tuple[np.ndarray, float, float]:
        out, t_tok, t_fwd = [], 0.0, 0.0
        for i in range(0, len(texts), args.batch_size):
            t0 = time.process_time()
            feats = enc.tokenize(texts[i : i + args.batch_size])
            t1 = time.process_time()
            out.append(enc(feats).numpy())
            t_tok, t_fwd = t_tok + t1 - t0, t_fwd + time.process_time() - t1
        return np.concatenate(out), t_tok, t_fwd

    print(f"propositions: {len(props):,} (mean {np.mean([len(p) for p in props]):.0f} chars)")
    for dim in args.dims:
        enc = HashEncoder(dim)
        encode(enc, props[:2000])  # warm-up
        _, t_tok, t_fwd = encode(enc, props)
        t0 = time.process_time()
        enc.token_lengths(props)
        t_len = time.process_time() - t0
        print(
            f"dim {dim}: {len(props) / (t_tok + t_fwd):,.0f} units/CPU-s, {args.threads} thread(s)"
            f" (tokenize+hash {len(props) / t_tok:,.0f}/s, forward {len(props) / t_fwd:,.0f}/s;"
            f" token_lengths {len(props) / t_len:,.0f}/s)"
        )

    texts = [f"{p['title']} {p['text']}" for p in passages]
    answers = [q["answers"] for q in questions]
    gold = np.array([[has_answer(a, t) for t in texts] for a in answers])  # [q, passages]
    kmax = max(args.ks)
    print(
        f"\nrecall on {len(passages):,} passages, {len(questions):,} questions"
        f" (random ranking: "
        + ", ".join(f"@{k} {random_recall(gold.sum(1), len(texts), k):.3f}" for k in args.ks)
        + ")"
    )
    for dim in args.dims:
        enc = HashEncoder(dim)
        docs, _, _ = encode(enc, texts)
        qv, _, _ = encode(enc, [q["question"] for q in questions])
        index = faiss.IndexFlatIP(dim)
        index.add(docs)
        _, top = index.search(qv, kmax)
        hits = np.take_along_axis(gold, top, axis=1)
        rec = ", ".join(f"@{k} {hits[:, :k].any(1).mean():.3f}" for k in args.ks)
        index16 = faiss.IndexFlatIP(dim)
        index16.add(docs.astype(np.float16).astype(np.float32))
        _, top16 = index16.search(qv, kmax)
        changed = ", ".join(
            f"@{k} {int((np.sort(top[:, :k], 1) != np.sort(top16[:, :k], 1)).any(1).sum())}"
            for k in args.ks
        )
        hits16 = np.take_along_axis(gold, top16, axis=1)
        rec16 = ", ".join(f"@{k} {hits16[:, :k].any(1).mean():.3f}" for k in args.ks)
        print(f"dim {dim}: recall {rec}")
        print(f"  float16 storage: recall {rec16}; questions whose top-k set changes: {changed}")


if __name__ == "__main__":
    main()
