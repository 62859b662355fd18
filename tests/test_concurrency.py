"""One build per artifact under real concurrency (issue 23), through `evaluate.py`.

- Two and three `evaluate.py` processes started together on one fresh cache, same demo cell:
  across all their output the units are written once, each embedding shard is encoded once
  (the processes share the shards), the index is built once ("new index" once), and every
  process's results equal a single run's.
- The lock holder SIGKILLed mid-encoding (squad-open passages, 18 shards): the other process
  takes its claimed shard over and finishes with the single run's embeddings, bit for bit.
- Two `index.py stage=propositions` runs with a tiny T5 share the generation shards (each
  generated once) and write the single run's propositions file.
- A joblib sweep (2 jobs) of 4 cells over 2 indexes builds each index once.

Each test runs several interpreters that load torch and encode: all `slow`.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.env import subprocess_env
from helpers.procs import REPO, Proc

pytestmark = pytest.mark.slow

ENV = subprocess_env(HYDRA_FULL_ERROR="1", COLUMNS="1000", DENSEX_PROGRESS_S="2")
COMMON = ("trainer=cpu", "trainer.enable_progress_bar=false")
# the demo's sentences in shards of 16 rows: several shards to share
DEMO_CELL = (
    "corpus=demo",
    "dataset=demo",
    "granularity=sentence",
    "topk=[1,5,20]",
    "cache.embedding_shard_size=16",
)


def _evaluate(run: Path, cache: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / "evaluate.py"),
        f"hydra.run.dir={run}",
        f"paths.cache_dir={cache}",
        *COMMON,
        *overrides,
    ]


def _metrics(run_dir: Path) -> dict:
    row = json.loads((run_dir / "results.jsonl").read_text())
    return {k: v for k, v in row.items() if not k.startswith("time_")}


def _shard_stems(cache: Path) -> list[str]:
    (manifest,) = (cache / "embeddings").rglob("manifest.json")
    shards = json.loads(manifest.read_text())["shards"]
    return [s["file"].removeprefix("emb-").removesuffix(".npy") for s in shards]


def _arrays(cache: Path) -> dict[str, bytes]:
    root = cache / "embeddings"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*-*.*"))}


@pytest.fixture(scope="module")
def single_run(tmp_path_factory) -> Path:
    """The demo cell run alone, on its own cache."""
    root = tmp_path_factory.mktemp("single")
    Proc(_evaluate(root / "run", root / "cache", *DEMO_CELL), ENV).finish()
    return root


@pytest.mark.parametrize("n", [2, 3])
def test_concurrent_evaluates_build_every_artifact_once(n, single_run, tmp_path):
    cache = tmp_path / "cache"
    procs = [Proc(_evaluate(tmp_path / f"run{i}", cache, *DEMO_CELL), ENV) for i in range(n)]
    logs = [p.finish() for p in procs]
    text = "\n".join(logs)
    assert text.count("units: wrote") == 1, text[-3000:]
    encoded = re.findall(r"encoding shard (\d+-\d+) \(", text)
    stems = _shard_stems(cache)
    assert sorted(encoded) == sorted(stems), (encoded, stems)  # each shard once, none missing
    print("shards encoded per process:", [len(re.findall(r"encoding shard \d+", x)) for x in logs])
    assert text.count("new index") == 1
    assert len(list((cache / "index").rglob("manifest.json"))) == 1
    for i in range(n):
        assert _metrics(tmp_path / f"run{i}") == _metrics(single_run / "run")
    assert _arrays(cache) == _arrays(single_run / "cache")
    assert not list(cache.rglob("*.tmp"))


SQUAD_CELL = (
    "corpus=squad-open",
    "corpus.granularities=[passage]",
    "dataset=squad-open",
    "limit_questions=200",
    "topk=[1,5,20]",
    "cache.embedding_shard_size=128",  # 2,203 passages: 18 shards
)


def test_sigkill_of_the_lock_holder_mid_encoding_is_taken_over(squad_open, tmp_path):
    ref = tmp_path / "ref"
    Proc(_evaluate(ref / "run", ref / "cache", *SQUAD_CELL), ENV).finish()
    cache = tmp_path / "cache"
    holder = Proc(_evaluate(tmp_path / "a", cache, *SQUAD_CELL), ENV)
    waiter = Proc(_evaluate(tmp_path / "b", cache, *SQUAD_CELL), ENV)
    holder.until("encoding shard")
    waiter.until("encoding shard")  # both encode: each holds a claim
    holder.kill()  # SIGKILL mid-encoding: its claimed shard is never written
    out = waiter.finish()
    assert holder.p.returncode == -9
    assert "new index" in out
    assert len(_shard_stems(cache)) == 18
    assert _arrays(cache) == _arrays(ref / "cache")  # every shard's ids and vectors, bit for bit
    assert _metrics(tmp_path / "b") == _metrics(ref / "run")
    a_shards = set(re.findall(r"encoding shard (\d+-\d+) \(", holder.text()))
    b_shards = set(re.findall(r"encoding shard (\d+-\d+) \(", out))
    assert a_shards & b_shards, "the killed holder's claimed shard was encoded by the waiter"


def test_two_generations_share_the_shards_of_one_propositions_file(tmp_path, tiny_t5):
    args = ("corpus=demo", "corpus.propositions=null", "stage=propositions",
            "propositionizer=model", f"propositionizer.model={tiny_t5}",
            "propositionizer.shard_size=4", "propositionizer.max_new_tokens=12",
            "propositionizer.spacy_model=")  # fmt: skip

    def index(run: Path, cache: Path) -> list[str]:
        return [sys.executable, str(REPO / "index.py"), f"hydra.run.dir={run}",
                f"paths.cache_dir={cache}", *COMMON, *args]  # fmt: skip

    Proc(index(tmp_path / "r0", tmp_path / "ref"), ENV).finish()
    procs = [Proc(index(tmp_path / f"r{i}", tmp_path / "cache"), ENV) for i in (1, 2)]
    logs = [p.finish() for p in procs]
    shards = re.findall(r"generating shard (\d+) \(", " ".join(logs))
    assert sorted(map(int, shards)) == list(range(13))  # 51 passages / 4: each shard once
    print("shards generated per process:", [len(re.findall(r"generating shard", x)) for x in logs])
    (ref,) = (tmp_path / "ref" / "propositions").rglob("propositions.jsonl")
    (got,) = (tmp_path / "cache" / "propositions").rglob("propositions.jsonl")
    assert got.read_bytes() == ref.read_bytes()


def test_a_joblib_sweep_builds_each_index_once(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    sweep, cache = tmp_path / "sweep", tmp_path / "cache"
    cmd = [
        sys.executable,
        str(REPO / "evaluate.py"),
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={sweep}",
        f"paths.cache_dir={cache}",
        *COMMON,
        "corpus=demo",
        "dataset=demo",
        "topk=[1,5,20]",
        "granularity=passage,sentence",
        "budget=100,500",
    ]
    out = Proc(cmd, ENV).finish()
    logs = [p.read_text() for p in sorted(sweep.rglob("evaluate.log"))]
    assert len(logs) == 4
    text = " ".join(" ".join(logs).split())
    assert text.count("new index") == 2, out[-3000:]  # one per index, not one per cell
    assert len(list((cache / "index").rglob("manifest.json"))) == 2
    assert text.count("units: wrote") == 1
    rows = [json.loads(p.read_text()) for p in sorted(sweep.rglob("results.jsonl"))]
    by_granularity: dict[str, set] = {}
    for row in rows:
        by_granularity.setdefault(row["granularity"], set()).add(row["recall@5"])
    assert all(len(v) == 1 for v in by_granularity.values())  # budgets share one ranking
    assert np.isfinite([r["recall@5"] for r in rows]).all()
