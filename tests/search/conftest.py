"""The demo sweep and its opened indexes, shared by the search API / service / page tests.

One real `evaluate.py -m experiment=demo` multirun, run in the test process (MiniLM, the three
granularities, the first `N_QUESTIONS` demo questions), writes the sweep (retrieval files,
per-question rows, Table 2, win/loss, the answer-recall plot) and fills a cache the search API
then opens without encoding anything again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
    """Run the demo multirun into `root` (sweep/ and cache/): `evaluate.py -m` in this process
    (Hydra's multirun and its callbacks, no second interpreter; the entry script's own process
    is `tests/test_pipelines.py::test_evaluate_override_contract`'s); an error propagates with
    its traceback (HYDRA_FULL_ERROR=1)."""
    from helpers.inproc import run_script

    sweep, cache = root / "sweep", root / "cache"
    args = ["-m", "experiment=demo", "trainer=cpu", "trainer.enable_progress_bar=false",
            f"paths.cache_dir={cache}", f"limit_questions={N_QUESTIONS}",
            f"hydra.sweep.dir={sweep}"]  # fmt: skip
    before = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        status = run_script("evaluate.py", *args)
    finally:
        if before is None:
            del os.environ["HYDRA_FULL_ERROR"]
        else:
            os.environ["HYDRA_FULL_ERROR"] = before
    assert status == 0, f"evaluate.py {' '.join(args)}: exit {status}"
    return sweep, cache


@pytest.fixture(scope="session")
def demo_index(demo_sweep):
    """The three demo granularities opened by the Python API from the sweep's cache."""
    import densex

    _, cache = demo_sweep
    return densex.open_index(*demo_overrides(cache), "granularity=" + ",".join(GRANULARITIES))
