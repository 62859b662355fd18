"""The demo sweep the tests share: one real `evaluate.py -m experiment=demo` multirun, run in
the test process (MiniLM, the three granularities, the first `N_QUESTIONS` demo questions),
writes the sweep (retrieval files, per-question rows, Table 2, win/loss, the answer-recall
plot) and fills a cache the search API then opens without encoding anything again
(the session's `demo_sweep`, tests/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

GRANULARITIES = ("passage", "sentence", "proposition")
N_QUESTIONS = 60


def demo_overrides(cache: Path) -> list[str]:
    """The overrides that open the demo indexes the sweep built."""
    return ["corpus=demo", "dataset=demo", "retriever=minilm", "trainer=cpu",
            f"paths.cache_dir={cache}", f"limit_questions={N_QUESTIONS}"]  # fmt: skip


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
