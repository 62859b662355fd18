"""What the propositionizer quality report shows besides its files: the notes under its
table, the table printed to the console, and the W&B run.

Contract: `report_notes(summary, scorer)` -> the report's explanatory lines (`write_report`
writes them); `print_table` prints the aggregate table; `log_wandb` logs table and rows when a
W&B logger is configured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from densex.metrics.propositions import STOPWORDS_NAME
from densex.pipelines.edge import wandb_settings
from densex.report.propositions_files import log_report
from densex.report.wandb_log import init_run


def report_notes(summary: dict[str, Any], scorer: dict[str, Any]) -> list[str]:
    """The lines under the report's table: what each column means and where the passages,
    the scores and the parse counts came from."""
    n_out = summary["n_without_reference"]
    left_out = f"; {n_out} without a reference left out" if n_out else ""
    notes = [
        f"set-F1 / P / R: BERTScore F1 ({scorer.get('model_type')}, layer "
        f"{scorer.get('num_layers')}, idf {bool(scorer.get('idf'))}) between proposition sets; "
        "means over passages.",
        f"passages: {summary['subset']} articles (val_fraction {summary['val_fraction']}, "
        f"from {summary['val_fraction_from']}): {summary['n_evaluated']} passages of "
        f"{summary['n_articles']} articles{left_out}.",
        f"coverage / unsupported: distinct content words (lowercased tokens minus {STOPWORDS_NAME} "
        f"stop words, stemmer {summary['stemmer'] or 'none: exact tokens'}); unsupported = in "
        "neither the passage nor its title/section.",
        "words / prop: whitespace words, total over all propositions / number of propositions.",
    ]
    pred = summary.get("predictions")
    if pred:
        manifest = pred.get("generation_manifest")
        if manifest and not pred["per_passage_parse"]:
            keys = ("passages", "parsed_strict", "repaired", "unparseable", "fallback_total")
            counts = ", ".join(f"{k} {manifest.get(k)}" for k in keys)
            notes.append(f"parse counts of the whole generated file (manifest): {counts}.")
        notes.append(
            "parse rate: passages whose output parsed (strict or repaired JSON) to a non-empty "
            "list; the others fell back (propositionizer.fallback)."
        )
    return notes


def print_table(table: Sequence[dict[str, Any]], title: str) -> None:
    """Print the aggregate rows (one per system) as a rich table to the console."""
    t = Table(title=title)
    cols = ("system", "n_passages", "set_f1", "precision", "recall", "props_per_passage",
            "words_per_prop", "coverage", "unsupported", "parse_rate")  # fmt: skip
    names = ("system", "n", "set-F1", "P", "R", "props", "words", "cov", "unsup", "parse")
    for c, name in zip(cols, names):
        t.add_column(name, justify="left" if c == "system" else "right")
    for r in table:
        t.add_row(*(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    Console().print(t)


def log_wandb(cfg: DictConfig, table, rows, label: str | None) -> None:
    """The report's table and per-passage rows to W&B (nothing without a W&B logger)."""
    run = init_run(
        wandb_settings(cfg),
        save_dir=cfg.paths.output_dir,
        name=f"propositions-{label or 'baselines'}",
        job_type="propositions",
        config=OmegaConf.to_container(cfg, resolve=True),
    )
    if run is None:
        return
    log_report(run, table, rows)
    run.finish()
