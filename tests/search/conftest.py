"""The demo sweep and its opened indexes, shared by the search API / service / page tests.

One real `evaluate.py -m experiment=demo` multirun (MiniLM, the three granularities, the first
`N_QUESTIONS` demo questions) writes the sweep (retrieval files, per-question rows, Table 2,
win/loss, the answer-recall plot) and fills a cache the search API then opens without
encoding anything again.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.env import subprocess_env

GRANULARITIES = ("passage", "sentence", "proposition")
N_QUESTIONS = 60


def demo_overrides(cache: Path) -> list[str]:
    """The overrides that open the demo indexes the sweep built."""
    return ["corpus=demo", "dataset=demo", "retriever=minilm", "trainer=cpu",
            f"paths.cache_dir={cache}", f"limit_questions={N_QUESTIONS}"]  # fmt: skip


@pytest.fixture(scope="session")
def demo_sweep(
    repo_root: Path, minilm_path: str, tmp_path_factory: pytest.TempPathFactory, worker_id: str
):
    """(sweep dir, cache dir) of the demo multirun; its cell of granularity g is in `sweep/i`.
    Built once per test run: under pytest-xdist the workers share it through the run's common
    temporary directory, the first one builds it under a file lock (pytest-xdist's recipe)."""
    if worker_id == "master":  # no xdist
        return build_demo_sweep(repo_root, tmp_path_factory.mktemp("demo_sweep"))
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent  # one per run, above each worker's own
    root, done = shared / "demo_sweep", shared / "demo_sweep.done"
    with FileLock(str(shared / "demo_sweep.lock")):
        if not done.exists():
            build_demo_sweep(repo_root, root)
            done.touch()
    return root / "sweep", root / "cache"


def build_demo_sweep(repo_root: Path, root: Path) -> tuple[Path, Path]:
    """Run the demo multirun into `root` (sweep/ and cache/)."""
    sweep, cache = root / "sweep", root / "cache"
    cmd = [sys.executable, str(repo_root / "evaluate.py"), "-m", "experiment=demo",
           "trainer=cpu", "trainer.enable_progress_bar=false", f"paths.cache_dir={cache}",
           f"limit_questions={N_QUESTIONS}", f"hydra.sweep.dir={sweep}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=repo_root, env=subprocess_env(HYDRA_FULL_ERROR="1"),
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return sweep, cache


@pytest.fixture(scope="session")
def demo_index(demo_sweep):
    """The three demo granularities opened by the Python API from the sweep's cache."""
    import densex

    _, cache = demo_sweep
    return densex.open_index(*demo_overrides(cache), "granularity=" + ",".join(GRANULARITIES))
