"""`retriever=hash`: encoding speed (units/s, one core) and passage recall@k on squad-open.

    PYTHONPATH=src .venv/bin/python benchmarks/hash_retriever.py --threads 1
    PYTHONPATH=src .venv/bin/python benchmarks/hash_retriever.py --dims 256 4096 --questions 0

Speed: `HashEncoder.tokenize` + `forward` (what the Lightning encoder runs per batch) over every
squad-open proposition as "title proposition", in CPU seconds of this process (robust to a
shared machine; with --threads 1 that is units/s per core). Recall: squad-open passages and the first
`--questions` questions (0 = all), exact inner-product search (faiss IndexFlatIP), DPR
has_answer; next to it the recall of a random ranking (seed 0), and how many top-k sets change
when the passage vectors are stored as float16. Reads the shared data, never copies it.
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
    judged: dict[tuple[int, int], bool] = {}

    def hits_of(top: np.ndarray) -> np.ndarray:
        """has_answer of each retrieved passage, judged once per (question, passage)."""
        out = np.zeros(top.shape, dtype=bool)
        for (i, j), _ in np.ndenumerate(top):
            key = (i, int(top[i, j]))
            if key not in judged:
                judged[key] = has_answer(answers[i], texts[key[1]])
            out[i, j] = judged[key]
        return out

    def recall(hits: np.ndarray) -> str:
        return ", ".join(f"@{k} {hits[:, :k].any(1).mean():.3f}" for k in args.ks)

    kmax = max(args.ks)
    rng = np.random.default_rng(0)
    random_top = np.stack([rng.permutation(len(texts))[:kmax] for _ in questions])
    print(
        f"\nrecall on {len(passages):,} passages, {len(questions):,} questions"
        f" (a random ranking, seed 0: {recall(hits_of(random_top))})"
    )
    for dim in args.dims:
        enc = HashEncoder(dim)
        docs, _, _ = encode(enc, texts)
        qv, _, _ = encode(enc, [q["question"] for q in questions])
        index = faiss.IndexFlatIP(dim)
        index.add(docs)
        _, top = index.search(qv, kmax)
        index16 = faiss.IndexFlatIP(dim)
        index16.add(docs.astype(np.float16).astype(np.float32))
        _, top16 = index16.search(qv, kmax)
        changed = ", ".join(
            f"@{k} {int((np.sort(top[:, :k], 1) != np.sort(top16[:, :k], 1)).any(1).sum())}"
            for k in args.ks
        )
        print(f"dim {dim}: recall {recall(hits_of(top))}")
        print(
            f"  float16 storage: recall {recall(hits_of(top16))};"
            f" questions whose top-k set changes: {changed}"
        )


if __name__ == "__main__":
    main()
