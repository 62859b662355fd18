"""`logger=none` (no experiment tracker) works for every entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers.env import subprocess_env


def run_entry(repo_root, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = subprocess_env()
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def test_train_with_logger_none(repo_root, squad_open, minilm_path, tmp_path):
    """The issue's command: a learning-rate monitor without a logger used to raise."""
    run = tmp_path / "run"
    run_entry(
        repo_root,
        "train.py",
        "model=tiny",
        "trainer.max_epochs=1",
        "++trainer.limit_train_batches=4",
        "++trainer.limit_val_batches=2",
        "logger=none",
        "trainer=cpu",
        f"paths.data_dir={squad_open.parent}",
        f"model.metric.model_type={minilm_path}",
        "data.limit_val=4",
        "model.max_new_tokens=8",
        f"hydra.run.dir={run}",
        f"paths.cache_dir={tmp_path / 'cache'}",
    )
    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["global_step"] == 4 and (run / "hf_model" / "config.json").exists()
    assert not (run / "csv").exists() and not (run / "wandb").exists()


@pytest.mark.parametrize("entry", ["index.py", "evaluate.py"])
def test_index_and_evaluate_with_logger_none(repo_root, tmp_path, entry):
    run = tmp_path / "run"
    args = [entry, "corpus=demo", "granularity=passage", "retriever=bm25", "logger=none"]
    if entry == "evaluate.py":
        args += ["dataset=demo", "topk=[1,5]"]
    run_entry(repo_root, *args, f"hydra.run.dir={run}", f"paths.cache_dir={tmp_path / 'cache'}")
    assert not (run / "wandb").exists()
    if entry == "evaluate.py":
        row = json.loads((run / "results.jsonl").read_text().splitlines()[0])
        assert row["n_questions"] == 150 and row["recall@5"] > 50
    else:
        assert list((tmp_path / "cache" / "bm25").rglob("manifest.json"))
