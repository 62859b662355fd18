"""The reliability table's cheap faults, tried in-process on whichever `densex` is on PYTHONPATH
(run it on the old and the new source to compare): deep nesting, garbage and 1 MB replies, a
non-UTF-8 byte, wrong types, a truncated cached units file, unsafe torch.load.

    PYTHONPATH=<src> HF_HUB_OFFLINE=1 python benchmarks/fault_table.py
"""

from __future__ import annotations

import inspect
import json
import tempfile
from pathlib import Path

import numpy as np

from densex.corpus.readers import Skips, read_passages
from densex.corpus.units import build_units
from densex.pipelines.compose import group_config
from densex.pipelines.train import checkpoints as train_checkpoints
from densex.pipelines.train import run as train
from densex.pipelines.train import setup as train_setup
from densex.propositionizer.resolve import resolve_output

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"


def tryit(name: str, f) -> None:
    try:
        print(name, "->", repr(f())[:300])
    except BaseException as e:  # noqa: BLE001 - the point is to show what happens
        print(name, "-> raised", type(e).__name__, str(e)[:200])


def summary(r) -> tuple:
    return len(r.propositions), max(map(len, r.propositions)), r.result.ok, r.fallback


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    tryit("nested 5000", lambda: resolve_output("[" * 5000 + "]" * 5000, "A. B.", "passage"))
    rng = np.random.default_rng(0)
    garbage = bytes(rng.integers(32, 127, 3_000_000, dtype=np.uint8)).decode()
    tryit("3MB garbage", lambda: summary(resolve_output(garbage, "A. B.", "passage")))
    one_mb = json.dumps(["y" * 10**6])
    tryit("1MB string", lambda: summary(resolve_output(one_mb, "A. B.", "passage")))

    lines = (DEMO / "passages.jsonl").read_bytes().splitlines(keepends=True)[:8]
    lines[4] = lines[4].replace(b"the", b"th\xe9", 1)
    p = tmp / "p.jsonl"
    p.write_bytes(b"".join(lines))
    tryit("bad byte raise", lambda: read_passages(p))
    tryit("bad byte skip", lambda: len(read_passages(p, Skips("skip"))))

    q = tmp / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "text": 5}) + "\n" + json.dumps({"id": "b", "text": ["x"]}))
    s = Skips("skip")
    read_passages(q, s)
    print("wrong types ->", s.examples)

    corpus = group_config("corpus", "demo", "corpus.segmentation.spacy_model=")
    f = build_units(corpus, tmp / "u")
    good = f["passage"].read_bytes()
    f["passage"].write_bytes(b"".join(good.splitlines(keepends=True)[:40]))
    f2 = build_units(corpus, tmp / "u")
    print("truncated units ->", len(f2["passage"].read_bytes().splitlines()), "lines after reuse")
    sources = "".join(inspect.getsource(m) for m in (train, train_checkpoints, train_setup))
    print("weights_only=False in train.py ->", "weights_only=False" in sources)


if __name__ == "__main__":
    main()
