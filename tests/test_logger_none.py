"""`logger=none` (no experiment tracker) works for every entry point.

Each entry's pipeline runs in this process (`preflight`, then `densex.pipelines.<entry>.run`,
what the entry script calls after Hydra composed the same config): no interpreter start-up,
the same code path below the Hydra decorator.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from densex.pipelines.preflight.run import preflight
from helpers.config import compose_config


def run_entry(entry: str, run_dir: Path, *overrides: str) -> None:
    """`python <entry>.py overrides... hydra.run.dir=run_dir`, in process."""
    cfg = compose_config(entry, *overrides, f"paths.output_dir={run_dir}")
    preflight(cfg, entry)
    importlib.import_module(f"densex.pipelines.{entry}.run").run(cfg)


def test_train_with_logger_none(squad_open, minilm_path, tmp_path, one_torch_thread):
    """The issue's command: a learning-rate monitor without a logger used to raise."""
    run = tmp_path / "run"
    run_entry(
        "train",
        run,
        "model=tiny",
        "trainer.max_epochs=1",
        "++trainer.limit_train_batches=4",
        "++trainer.limit_val_batches=2",
        "logger=none",
        "trainer=cpu",
        "trainer.enable_progress_bar=false",
        f"paths.data_dir={squad_open.parent}",
        f"model.metric.model_type={minilm_path}",
        "data.limit_train=32",  # the tiny vocabulary is trained on these: 4 batches use 32
        "data.limit_val=4",
        "model.max_new_tokens=8",
        f"paths.cache_dir={tmp_path / 'cache'}",
    )
    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["global_step"] == 4 and (run / "hf_model" / "config.json").exists()
    assert not (run / "csv").exists() and not (run / "wandb").exists()


@pytest.mark.parametrize("entry", ["index", "evaluate"])
def test_index_and_evaluate_with_logger_none(tmp_path, entry):
    run = tmp_path / "run"
    args = ["corpus=demo", "granularity=passage", "retriever=bm25", "logger=none"]
    if entry == "evaluate":
        args += ["dataset=demo", "topk=[1,5]"]
    run_entry(entry, run, *args, f"paths.cache_dir={tmp_path / 'cache'}")
    assert not (run / "wandb").exists()
    if entry == "evaluate":
        row = json.loads((run / "results.jsonl").read_text().splitlines()[0])
        assert row["n_questions"] == 150 and row["recall@5"] > 50
    else:
        assert list((tmp_path / "cache" / "bm25").rglob("manifest.json"))
