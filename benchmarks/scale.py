"""Scale: every stage at N = 0.1M, 1M and 4M proposition units, time and peak RSS, with
`retriever=hash` (no model, so a 2-core machine can run it).

    .venv/bin/python benchmarks/scale.py                      # N = 100000 1000000 4000000
    .venv/bin/python benchmarks/scale.py --units 100000 1000000 --work /tmp/scale

For each N it writes a deterministic synthetic corpus made from the demo corpus's words
(N/8 passages of 8 propositions each, a passage's text = its propositions; 1,000 questions whose
answer is a word of one proposition), then runs the two commands of a new user, each in a fresh
process under `/usr/bin/time -v` (peak RSS = "Maximum resident set size", which counts the
pages of memory-mapped files too):

    index.py stage=units             passages + proposition units (JSONL + Arrow shards)
    evaluate.py retriever=hash retriever.dim=256 granularity=proposition limit_questions=1000
                retrieval_text=false  (encode -> faiss shards -> search -> recall, answer recall)

It prints one row per (N, stage): wall time, peak RSS, units/s and evaluate's own breakdown
with, per phase of evaluate (encode, build = the index build after encoding, search, answers),
the peak anonymous and mapped (file-backed) memory sampled from /proc/<pid>/status,
then the growth exponents b of time ~ N^b and memory ~ N^b between consecutive sizes and over
all (least squares on log-log). Linear time is b ~ 1; memory that does not grow is b ~ 0.
Outputs land in --work (default .cache/scale); a size whose units are cached reuses them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PROPS_PER_PASSAGE = 8
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",  # log lines reach the phase sampler as they are written
}


def vocabulary(demo_dir: Path) -> list[str]:
    """The demo corpus's distinct lowercased words, in a fixed order."""
    words: set[str] = set()
    for name in ("passages.jsonl", "propositions.jsonl"):
        words.update(re.findall(r"[a-z0-9]+", (demo_dir / name).read_text().lower()))
    return sorted(words)


def make_corpus(out: Path, n_units: int, n_questions: int = 1000, seed: int = 0) -> Path:
    """passages.jsonl, propositions.jsonl, questions.jsonl of N units (skipped if present).
    Words follow a Zipf law over the demo vocabulary; every proposition is distinct."""
    done = out / "done.json"
    if done.exists() and json.loads(done.read_text()).get("units") == n_units:
        return out
    out.mkdir(parents=True, exist_ok=True)
    vocab = np.array(vocabulary(REPO / "data" / "demo"))
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    order = rng.permutation(len(vocab))
    n_passages = n_units // PROPS_PER_PASSAGE
    asked = set(rng.choice(n_passages, size=min(n_questions, n_passages), replace=False).tolist())
    questions = []
    with (
        open(out / "passages.jsonl", "w") as fp,
        open(out / "propositions.jsonl", "w") as fq,
    ):
        for start in range(0, n_passages, 20_000):
            count = min(20_000, n_passages - start)
            lengths = rng.integers(6, 15, size=count * PROPS_PER_PASSAGE)
            ranks = rng.choice(len(vocab), size=int(lengths.sum()), p=weights)
            words = vocab[order[ranks]]
            ends = np.cumsum(lengths)
            props = [" ".join(words[e - n : e]) for e, n in zip(ends, lengths)]
            for i in range(count):
                pid = f"synthetic-{start + i}"
                mine = [p.capitalize() + "." for p in props[i * 8 : (i + 1) * 8]]
                title = f"Topic {start + i}"
                fp.write(json.dumps({"id": pid, "title": title, "section": "",
                                     "text": " ".join(mine)}) + "\n")  # fmt: skip
                fq.write(json.dumps({"id": pid, "propositions": mine}) + "\n")
                if start + i in asked:  # answer: the rarest word of the passage's first one
                    j = i * PROPS_PER_PASSAGE
                    q_words = props[j].split()
                    rare = int(np.argmax(ranks[ends[j] - lengths[j] : ends[j]]))
                    answer = q_words.pop(rare)
                    questions.append({"id": f"q{len(questions)}",
                                      "question": " ".join(q_words) + "?",
                                      "answers": [answer]})  # fmt: skip
    with open(out / "questions.jsonl", "w") as f:
        for q in questions:
            f.write(json.dumps(q) + "\n")
    done.write_text(json.dumps({"units": n_units, "passages": n_passages}))
    return out


# evaluate's log lines that open a phase (the sampler files each memory sample under the last)
PHASES = [
    (re.compile(r"encoding [\d,]+ units"), "encode"),
    (re.compile(r"predict: .* in \d+:\d\d"), "build"),  # encoding's closing line
    (re.compile(r"searcher over"), "search"),
    (re.compile(r"answers in passages"), "answers"),
]


def _descendants(pid: int) -> list[int]:
    """`pid`'s child processes, recursively (from /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _rss_kb(pid: int) -> tuple[int, int]:
    """(RssAnon, RssFile + RssShmem) of `pid` in kB; (0, 0) once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    kb = {k: int(v) for k, v in re.findall(r"^(Rss\w+):\s+(\d+) kB", text, re.M)}
    return kb.get("RssAnon", 0), kb.get("RssFile", 0) + kb.get("RssShmem", 0)


def timed(cmd: list[str], log: Path) -> dict[str, Any]:
    """Run `cmd` under /usr/bin/time -v; wall seconds, peak RSS (MB) and, sampled every 0.1 s
    from /proc/<pid>/status over the command's processes, the peak anonymous and file-backed
    (mapped) memory of each phase its log opens (`PHASES`)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        ["/usr/bin/time", "-v", *cmd], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env={**os.environ, **ENV},
    )  # fmt: skip
    phase, peaks, done = ["start"], {}, threading.Event()

    def take() -> None:
        pids = _descendants(proc.pid)
        anon, mapped = map(sum, zip((0, 0), *(_rss_kb(p) for p in pids)))
        peak = peaks.setdefault(phase[0], [0, 0, 0])
        peak[:] = [max(peak[0], anon), max(peak[1], mapped), max(peak[2], anon + mapped)]

    def sample() -> None:
        while not done.wait(0.1):
            take()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with open(log, "w") as f:
        for line in proc.stdout:
            f.write(line)
            for pattern, name in PHASES:
                if pattern.search(line):
                    phase[0] = name
                    take()  # a phase shorter than the sampling interval still gets a sample
    proc.wait()
    done.set()
    sampler.join()
    wall = time.perf_counter() - t0
    text = log.read_text()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd[:2])} failed (rc {proc.returncode}); see {log}")
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    mb = {k: [round(v / 1024) for v in p] for k, p in peaks.items()}
    return {"wall_s": wall, "rss_mb": rss_kb / 1024, "phases_mb": mb}


def overrides(corpus: Path, work: Path, n: int) -> list[str]:
    return [
        "corpus=squad-open",
        f"corpus.name=scale-{n}",
        f"corpus.passages={corpus / 'passages.jsonl'}",
        f"corpus.propositions={corpus / 'propositions.jsonl'}",
        "++corpus.granularities=[passage,proposition]",
        f"paths.cache_dir={work / 'cache'}",
        "logger=none",
        f"hydra.run.dir={work / 'runs' / str(n) / '${task_name}'}",
    ]


def run_size(n: int, work: Path, extra: list[str]) -> list[dict]:
    corpus = make_corpus(work / f"corpus-{n}", n)
    base = overrides(corpus, work, n)
    py = sys.executable
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    units = timed([py, "index.py", "stage=units", *base], logs / f"units-{n}.log")
    out_dir = work / "runs" / str(n) / "evaluate"
    evaluate = timed(
        [py, "evaluate.py", *base, "retriever=hash", "retriever.dim=256",
         "granularity=proposition", "limit_questions=1000", "retrieval_text=false",
         "dataset=squad-open", f"dataset.name=scale-{n}",
         f"dataset.path={corpus / 'questions.jsonl'}", "dataset.qrels.path=null",
         f"paths.output_dir={out_dir}", *extra],
        logs / f"evaluate-{n}.log",
    )  # fmt: skip
    row = json.loads((out_dir / "results.jsonl").read_text().splitlines()[0])
    parts = {k[5:-2]: row[k] for k in row if k.startswith("time_") and k != "time_total_s"}
    memory = " ".join(
        f"{k} {a}+{m}" for k, (a, m, _) in evaluate["phases_mb"].items() if k != "start"
    )
    return [
        {"N": n, "stage": "index.py stage=units", **units, "detail": ""},
        {"N": n, "stage": "evaluate.py (hash)", **evaluate,
         "detail": " ".join(f"{k} {v:.0f}s" for k, v in parts.items())
         + f" | R@20 {row.get('recall@20', float('nan')):.1f}"
         + f" | peak MB anon+mapped: {memory}"},
    ]  # fmt: skip


def exponent(ns: list[int], values: list[float]) -> float:
    """Least-squares slope of log(value) on log(N)."""
    return float(np.polyfit(np.log(ns), np.log(values), 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--units", type=int, nargs="+", default=[100_000, 1_000_000, 4_000_000])
    ap.add_argument("--work", type=Path, default=REPO / ".cache" / "scale")
    ap.add_argument("--evaluate-overrides", nargs="*", default=[],
                    help="extra overrides for evaluate.py, e.g. index.blas_threshold=20")  # fmt: skip
    args = ap.parse_args()
    rows = []
    for n in sorted(args.units):
        rows += run_size(n, args.work.resolve(), args.evaluate_overrides)
        for r in rows[-2:]:
            print(f"{r['N']:>9,} {r['stage']:<22} {r['wall_s']:8.1f} s {r['rss_mb']:8.0f} MB "
                  f"{r['N'] / r['wall_s']:10,.0f} units/s  {r['detail']}", flush=True)  # fmt: skip
    print("\n| N units | stage | wall (s) | peak RSS (MB) | units/s | detail |")
    print("|---:|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['N']:,} | {r['stage']} | {r['wall_s']:.1f} | {r['rss_mb']:.0f} | "
              f"{r['N'] / r['wall_s']:,.0f} | {r['detail']} |")  # fmt: skip
    ns = sorted(args.units)
    if len(ns) < 2:
        return
    print("\ngrowth exponents b (value ~ N^b): time | memory")
    for stage in dict.fromkeys(r["stage"] for r in rows):
        mine = [r for r in rows if r["stage"] == stage]
        pairs = [
            f"{a['N']:,}->{b['N']:,}: "
            f"{exponent([a['N'], b['N']], [a['wall_s'], b['wall_s']]):.2f} | "
            f"{exponent([a['N'], b['N']], [a['rss_mb'], b['rss_mb']]):.2f}"
            for a, b in zip(mine, mine[1:])
        ]
        overall = (
            f"{exponent(ns, [r['wall_s'] for r in mine]):.2f} | "
            f"{exponent(ns, [r['rss_mb'] for r in mine]):.2f}"
        )
        print(f"  {stage:<22} all: {overall}   " + "   ".join(pairs))


if __name__ == "__main__":
    main()
