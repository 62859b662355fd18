"""What an evaluate cell leaves besides its retrieval files: the run-dir files, the logged
metric table and the W&B run.

Contract: `write_cell_files` writes `recall_at_k.csv`, `per_question.jsonl`, `results.jsonl`
(the one row the sweep callback reads) and `answer_recall_by_words.png` atomically;
`print_metrics` logs the row as a table (console and `evaluate.log`, under the
`densex.pipelines.evaluate.run` logger); `log_wandb` logs the row, samples and curves when a
W&B logger is configured.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.table import Table

from densex.analysis.per_question import per_question_rows, write_per_question
from densex.pipelines.edge import wandb_settings
from densex.pipelines.evaluate.cell import CONFIG_KEYS
from densex.qa.cell import CURVE_FILE, read_curve
from densex.utils.io import atomic_open, write_jsonl
from densex.utils.logging import get_logger, render

log = get_logger("densex.pipelines.evaluate.run")  # the stage's log lines keep its name


def write_cell_files(cfg, out_dir: Path, row, curve, questions, hits, topk, per_q) -> None:
    """recall_at_k.csv (not without answer strings: `curve` None), per_question.jsonl,
    results.jsonl and the answer-recall plot."""

    if curve is not None:
        with atomic_open(out_dir / "recall_at_k.csv") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["k", "recall"])
            w.writerows([[k + 1, round(100.0 * float(v), 4)] for k, v in enumerate(curve)])
    write_per_question(out_dir, per_question_rows(questions, hits, topk, per_q))
    write_jsonl(out_dir / "results.jsonl", [row])
    plot_cell(out_dir, int(cfg.budget))


def plot_cell(out_dir: Path, budget: int) -> Path | None:
    """`answer_recall_by_words.png` of this one cell (a sweep's callback plots them all)."""
    from densex.report.plots import plot_answer_recall  # matplotlib: only when plotting

    if not (out_dir / CURVE_FILE).exists():
        return None
    return plot_answer_recall([out_dir], out_dir / "answer_recall_by_words.png", budgets=(budget,))


def print_metrics(row: dict[str, Any]) -> None:
    """The cell's metrics as a table, logged (so it is in the console and in `evaluate.log`)."""

    title = " / ".join(str(row[k]) for k in ("retriever", "granularity", "dataset"))
    t = Table(title=title)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k, v in row.items():
        if k in CONFIG_KEYS or k == "budget" or v is None:
            continue
        if isinstance(v, float) and k.startswith(("recall@", "em@", "answer_recall@")):
            t.add_row(k, f"{v:.1f}")
        else:
            t.add_row(k, str(v))
    log.info("metrics of %s\n%s", title, render(t))


def _wandb_samples(dpr_rows, units, results) -> list[dict[str, Any]]:
    samples = []
    for q, r in zip(dpr_rows, results):  # the first `log_samples` rows
        top = q["ctxs"][0] if q["ctxs"] else {}
        samples.append(
            {
                "question": q["question"],
                "answers": "; ".join(q["answers"]),
                "top_unit": units.take("text", r.unit_rows[:1])[0] if len(r.unit_rows) else "",
                "top_passage": (
                    f"{top.get('title', '')}: {top['text']}" if "text" in top else top.get("id", "")
                ),
                "top_has_answer": top.get("has_answer", False),
                "first_hit_rank": next(
                    (i + 1 for i, c in enumerate(q["ctxs"]) if c.get("has_answer")), None
                ),
            }
        )
    return samples


def log_wandb(cfg: DictConfig, row, dpr_rows, units, results, curve) -> None:
    """The cell's row, its first `log_samples` questions and its curves to W&B (when a W&B
    logger is configured; nothing otherwise)."""
    from densex.report.wandb_log import init_run, log_cell  # wandb: only with a logger

    run = init_run(
        wandb_settings(cfg),
        save_dir=cfg.paths.output_dir,
        name=run_name(row),
        job_type="evaluate",
        config=OmegaConf.to_container(cfg, resolve=True),
    )
    if run is None:
        return
    samples = _wandb_samples(dpr_rows, units, results)

    curve_path = Path(cfg.paths.output_dir) / CURVE_FILE
    answer_recall = read_curve(curve_path) if curve_path.exists() else None
    log_cell(run, row, samples, curve if curve is not None else (), answer_recall)
    run.finish()


def run_name(row: dict[str, Any]) -> str:
    """A run name unique within a sweep that says the cell's overrides, as its folder does:
    retriever-granularity-dataset, then every other override of the job's command line as
    `key=value` (`budget=500`, `reader=tiny`), but those the cell folders leave out
    (`hydra.job.config.override_dirname.exclude_keys`, conf/hydra/evaluate.yaml: paths, the
    experiment's name, logging) and `hydra.*`."""
    parts = [str(row.get(k)) for k in ("retriever", "granularity", "dataset")]
    shown = {"retriever", "granularity", "dataset"}
    try:
        from hydra.core.hydra_config import HydraConfig

        hydra = HydraConfig.get() if HydraConfig.initialized() else None
    except (ImportError, ValueError):
        hydra = None
    overrides = list(hydra.overrides.task) if hydra is not None else []
    if hydra is not None:
        shown |= set(hydra.job.config.override_dirname.exclude_keys or [])
    for ov in overrides:
        key, _, value = ov.lstrip("+~").partition("=")
        if key in shown or key.startswith(("hydra.", "paths.")) or not value:
            continue
        shown.add(key)
        parts.append(f"{key}={value}")
    return "-".join(parts)
