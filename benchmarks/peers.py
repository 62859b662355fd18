"""densex against its peers, side by side in one run on the same texts and cores.

    flock /tmp/densex-cpu.lock .venv/bin/python benchmarks/peers.py          # ~10 min, 1 thread
    .venv/bin/python benchmarks/peers.py --n 16 --questions 8 --search-units 2000 --square 8

1. encode: the first `--n` squad-open passages (all 2,203 by default) with the packaged
   all-MiniLM-L6-v2, through densex's own path (`encode_units_to_dir`: Lightning predict,
   shards, longest-first) for each `retriever.runtime` (torch, onnx, openvino in fp32 and in
   bf16 (`retriever.precision=bf16-mixed`), onnx + int8),
   against `SentenceTransformer.encode` with each of its backends (torch, onnx, onnx-int8,
   openvino at OpenVINO's default precision for the CPU (bf16 where it has AMX) and at f32).
   A backend that does not load in densex's environment runs in the interpreters given by
   `--st-env` (`benchmarks/peer_envs.sh` makes them; `benchmarks/st_encode.py` runs there) on
   the same texts, or is named with the reason. Rates in units/s and
   word pieces/s per core against the ~4,700 tokens/s a core can give MiniLM-L6 (~20 MFLOP a
   token at ~96 GFLOP/s fp32). The exports are made before the clock starts.
2. recall: squad-open passage recall@5/@20 (all questions by default; DPR has_answer) of each
   densex runtime's vectors and each sentence-transformers backend's (its own query vectors),
   exact search; the torch vectors also through faiss's SIMD loops
   (`index.blas_threshold=null`), the figures published before BLAS became the default.
3. search: exact top-100 of `--queries` queries over `--search-units` random unit vectors:
   densex's `ShardedIndex` at default settings vs a plain `faiss.IndexFlatIP.search` (this
   faiss build's defaults) and pyserini's `FaissSearcher` when it is installed.
4. set-F1: one `--square` x `--square` set pair, densex vs bert-score's best batching.

Ends with `encode: densex best / sentence-transformers best = R.RRx`, where "best" is the
fastest backend on each side whose R@5 is within 0.3 pt of densex's torch path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
CEILING = 4700  # MiniLM-L6 tokens/s one core can give (~20 MFLOP a token, ~96 GFLOP/s fp32)
RUNTIMES = {
    "torch": [],
    "onnx": ["retriever.runtime=onnx"],
    "openvino": ["retriever.runtime=openvino"],
    "openvino-bf16": ["retriever.runtime=openvino", "retriever.precision=bf16-mixed"],
    "onnx-int8": ["retriever.runtime=onnx", "retriever.quantize=int8"],
}
ST_BACKENDS = {
    "torch": {"backend": "torch"},
    "onnx": {"backend": "onnx"},
    "onnx-int8": {"backend": "onnx", "model_kwargs": {"file_name": "onnx/model_qint8_avx2.onnx"}},
    "openvino": {"backend": "openvino"},
    "openvino-f32": {
        "backend": "openvino",
        "model_kwargs": {"ov_config": {"INFERENCE_PRECISION_HINT": "f32"}},
    },  # fmt: skip
}


def densex_encode(units: list[dict], name: str, overrides: list[str], work: Path, args) -> dict:
    """One densex runtime: vectors (file order) and units/s of the encode stage."""
    from densex.pipelines.compose import group_config
    from densex.pipelines.edge import retriever_spec
    from densex.retrieval.encode import encode_units_to_dir
    from densex.utils.io import write_jsonl

    cfg = retriever_spec(group_config(
        "retriever", "minilm", f"retriever.batch_size={args.batch_size}",
        f"retriever.export_dir={work / 'exports'}", *overrides,
    ))  # fmt: skip
    trainer = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False}
    warm = work / f"warm-{name}.jsonl"
    write_jsonl(warm, units[:4])  # the export (and first-call costs) before the clock
    encode_units_to_dir(warm, cfg, work / f"warm-{name}", trainer, shard_size=len(units))
    path = work / "units.jsonl"
    t0 = time.perf_counter()
    store = encode_units_to_dir(path, cfg, work / f"emb-{name}", trainer, shard_size=len(units))
    wall = time.perf_counter() - t0
    vectors = np.concatenate([a for _, a in store.iter_arrays(len(units))]).astype(np.float32)
    return {"vectors": vectors, "rate": len(units) / wall, "cfg": cfg}


def st_encode(texts: list[str], queries: list[str], backend: str, args) -> dict:
    """`SentenceTransformer.encode` with one of its backends (its own length sorting), timed
    on the texts; the queries are encoded after the clock stops, for recall."""
    from sentence_transformers import SentenceTransformer

    from densex.utils.models import minilm_path

    try:
        model = SentenceTransformer(minilm_path(), device="cpu", **ST_BACKENDS[backend])
    except Exception as e:  # noqa: BLE001 - a backend that does not load is reported, not fatal
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:150]}"}
    model.encode(texts[:8], batch_size=args.batch_size)
    t0 = time.perf_counter()
    vectors = model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True)
    rate = len(texts) / (time.perf_counter() - t0)
    qv = model.encode(queries, batch_size=args.batch_size, normalize_embeddings=True)
    return {"vectors": vectors, "qvectors": qv, "rate": rate, "where": "densex's environment"}


def st_encode_elsewhere(python: str, backend: str, work: Path, args) -> dict:
    """The same, run by `benchmarks/st_encode.py` in another interpreter (`--st-env`) on the
    texts and queries `st_backends` wrote to `work`: one process, the queries off the clock."""
    name, precision = ("openvino", "f32") if backend == "openvino-f32" else (backend, None)
    cmd = [python, str(REPO / "benchmarks" / "st_encode.py"), "--backend", name,
           "--texts", str(work / "st-texts.jsonl"), "--out", str(work / "st-texts.npy"),
           "--queries", str(work / "st-queries.jsonl"), "--queries-out", str(work / "st-queries.npy"),
           "--threads", str(args.threads), "--batch-size", str(args.batch_size)]  # fmt: skip
    if precision:
        cmd += ["--precision", precision]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": f"{python}: " + (proc.stderr.strip().splitlines() or ["failed"])[-1][:150]}
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "vectors": np.load(work / "st-texts.npy"), "qvectors": np.load(work / "st-queries.npy"),
        "rate": info["rate"], "where": f"{python} (transformers {info['transformers']}"
        + (f", OpenVINO {info['openvino']}, {info['precision']}" if "openvino" in info else "")
        + ")",
    }  # fmt: skip


def st_backends(texts: list[str], queries: list[str], work: Path, args) -> dict:
    """Every sentence-transformers backend: here, else in the first `--st-env` that runs it."""
    from densex.utils.io import write_jsonl

    if args.st_env:  # the other interpreters read the same texts, written once
        write_jsonl(work / "st-texts.jsonl", [{"text": t} for t in texts])
        write_jsonl(work / "st-queries.jsonl", [{"text": q} for q in queries])
    theirs = {}
    for backend in ST_BACKENDS:
        r = st_encode(texts, queries, backend, args)
        for python in args.st_env if "error" in r else []:
            other = st_encode_elsewhere(python, backend, work, args)
            if "error" not in other:
                r = other
                break
            r["error"] += f"; {other['error']}"
        theirs[backend] = r
    return theirs


def encode_section(units: list[dict], queries: list[str], work: Path, args) -> tuple[dict, dict]:
    from densex.retrieval.encoders import build_retriever, format_units

    ours = {name: densex_encode(units, name, o, work, args) for name, o in RUNTIMES.items()}
    spec = build_retriever(ours["torch"]["cfg"]).spec
    texts = format_units(spec, units)
    enc = build_retriever(ours["torch"]["cfg"]).doc_encoder
    tokens = int(np.minimum(enc.token_lengths(texts), enc.max_tokens).sum()) + 2 * len(texts)
    theirs = st_backends(texts, queries, work, args)
    print(f"\n1. encode: {len(units):,} squad-open passages, {tokens / len(units):.0f} word "
          f"pieces each, MiniLM-L6, {args.threads} thread(s), batch {args.batch_size}")  # fmt: skip
    ref = ours["torch"]["vectors"]
    for label, rows in (("densex", ours), ("sentence-transformers", theirs)):
        for name, r in rows.items():
            if "error" in r:
                print(f"  {label:<22} {name:<12} not available: {r['error']}")
                continue
            per_core = r["rate"] * tokens / len(units) / args.threads
            cos = float((r["vectors"] * ref).sum(1).min())
            print(f"  {label:<22} {name:<12} {r['rate']:7.1f} units/s  {per_core:6.0f} tokens/s "
                  f"per core = {per_core / CEILING:5.1%} of {CEILING:,}  min cos to densex "
                  f"torch {cos:.4f}" + (f"  [{r['where']}]" if "where" in r else ""))  # fmt: skip
    return ours, theirs


def recall_section(
    ours: dict, theirs: dict, passages: list[dict], questions: list[dict], args
) -> None:
    from densex.metrics.answers import has_answer
    from densex.retrieval.encoders import build_retriever
    from densex.retrieval.faiss_index import build_index
    from densex.retrieval.spec import IndexSpec

    texts = [p["text"] for p in passages]
    judged: dict[tuple[int, int], bool] = {}

    def judge(q: int, r: int) -> bool:
        if (q, r) not in judged:  # each (question, passage) judged once over all runs
            judged[q, r] = has_answer(questions[q]["answers"], texts[r])
        return judged[q, r]

    def recall(top: np.ndarray, k: int) -> float:
        hits = [any(judge(q, int(r)) for r in top[q, :k]) for q in range(len(questions))]
        return 100 * float(np.mean(hits))

    print(f"\n2. recall: squad-open, {len(passages):,} passages, {len(questions):,} questions, "
          "passage granularity, exact search")  # fmt: skip
    base = None
    for name, r in ours.items():
        qv = build_retriever(r["cfg"]).encode_queries([q["question"] for q in questions])
        runs = [("", IndexSpec(use_gpu=False))]
        if name == "torch":
            runs.append((" (faiss SIMD loops)", IndexSpec(use_gpu=False, blas_threshold=None)))
        for suffix, ispec in runs:
            _, top = build_index(r["vectors"], ispec).search(qv, 20)
            r5, r20 = recall(top, 5), recall(top, 20)
            base = base or (r5, r20)
            print(f"  densex {name + suffix:<28} R@5 {r5:5.1f}  R@20 {r20:5.1f}  "
                  f"(vs torch {r5 - base[0]:+.2f} / {r20 - base[1]:+.2f} pt)")  # fmt: skip
            if not suffix:
                r["r5_loss"] = base[0] - r5
    for name, r in theirs.items():
        if "error" in r:
            continue
        _, top = build_index(r["vectors"], IndexSpec(use_gpu=False)).search(r["qvectors"], 20)
        r5, r20 = recall(top, 5), recall(top, 20)
        r["r5_loss"] = base[0] - r5
        print(f"  sentence-transformers {name:<13} R@5 {r5:5.1f}  R@20 {r20:5.1f}  "
              f"(vs densex torch {r5 - base[0]:+.2f} / {r20 - base[1]:+.2f} pt)")  # fmt: skip


def search_section(args) -> None:
    import faiss

    from densex.retrieval.faiss_index import build_index
    from densex.retrieval.spec import IndexSpec

    rng = np.random.default_rng(0)
    xb = rng.standard_normal((args.search_units, args.dim)).astype(np.float32)
    xb /= np.linalg.norm(xb, axis=1, keepdims=True)
    xq = xb[rng.choice(len(xb), args.queries)] + 0.1 * rng.standard_normal(
        (args.queries, args.dim)
    ).astype(np.float32)
    ours = build_index(xb, IndexSpec(use_gpu=False))
    t0 = time.perf_counter()
    d1, i1 = ours.search(xq, 100)
    t_ours = time.perf_counter() - t0
    flat = faiss.IndexFlatIP(args.dim)
    flat.add(xb)
    faiss.cvar.distance_compute_blas_threshold = 128000  # the faiss build's own default
    t0 = time.perf_counter()
    d2, i2 = flat.search(xq, 100)
    t_flat = time.perf_counter() - t0
    same = float((np.sort(i1, 1) == np.sort(i2, 1)).mean())
    print(f"\n3. search: exact top-100, {args.queries:,} queries x {args.search_units:,} units x "
          f"{args.dim} dims, {args.threads} thread(s)")  # fmt: skip
    print(f"  densex ShardedIndex (defaults)      {t_ours:8.2f} s")
    print(f"  faiss IndexFlatIP.search (defaults) {t_flat:8.2f} s   same top-100 sets: "
          f"{same:.4f}, max |d score| {np.abs(d1 - d2).max():.1e}")  # fmt: skip
    try:
        from pyserini.search.faiss import FaissSearcher  # noqa: F401
    except Exception as e:  # noqa: BLE001
        print(f"  pyserini FaissSearcher: not measured ({type(e).__name__}: pyserini is not "
              "installed; it needs ~40 packages incl. pyjnius and a JDK 21)")  # fmt: skip
    print(f"search: densex / faiss IndexFlatIP defaults = {t_flat / t_ours:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=0, help="passages to encode (0 = all)")
    ap.add_argument("--questions", type=int, default=0, help="questions for recall (0 = all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--search-units", type=int, default=500_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--square", type=int, default=100, help="set-F1 N x N; 0 = skip")
    ap.add_argument("--st-env", action="append", default=[], metavar="PYTHON",
                    help="an interpreter for the sentence-transformers backends that do not "
                         "load here (benchmarks/peer_envs.sh); repeatable")  # fmt: skip
    ap.add_argument("--data", default=os.environ.get("DENSEX_DATA_DIR", str(REPO.parent / "shared" / "data")))  # fmt: skip
    args = ap.parse_args()

    import faiss
    import torch

    from densex.utils.io import read_jsonl, write_jsonl

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    root = Path(args.data) / "squad-open"
    passages = list(read_jsonl(root / "passages.jsonl"))
    passages = passages[: args.n] if args.n else passages
    questions = list(read_jsonl(root / "questions.jsonl"))
    questions = questions[: args.questions] if args.questions else questions
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_jsonl(work / "units.jsonl", passages)
        ours, theirs = encode_section(passages, [q["question"] for q in questions], work, args)
        recall_section(ours, theirs, passages, questions, args)
    search_section(args)
    if args.square:
        sys.path.insert(0, str(Path(__file__).parent))
        from set_f1_bench import square

        from densex.metrics.set_f1 import SetF1Scorer

        print(f"\n4. set-F1: one {args.square} x {args.square} set pair, MiniLM backbone")
        rows = [r["propositions"] for r in read_jsonl(root / "propositions.jsonl")]
        scorer = SetF1Scorer("packaged:minilm", num_layers=6, lang=None)
        scorer.score(rows[:1], rows[1:2])  # warm-up
        square(scorer, rows[100:], args.square, [64, 256, 1024])

    # each side's fastest backend among those within 0.3 pt of densex's torch R@5
    def best(runs: dict) -> str:
        ok = [n for n, r in runs.items() if "error" not in r and r["r5_loss"] <= 0.3]
        return max(ok, key=lambda n: runs[n]["rate"])

    ours_best, st_best = best(ours), best(theirs)
    print(f"\ndensex best: {ours_best}; sentence-transformers best: {st_best} (each the fastest "
          "within 0.3 pt R@5 of densex torch; every rate: see 1.)")  # fmt: skip
    ratio = ours[ours_best]["rate"] / theirs[st_best]["rate"]
    print(f"encode: densex best / sentence-transformers best = {ratio:.2f}x")


if __name__ == "__main__":
    main()
