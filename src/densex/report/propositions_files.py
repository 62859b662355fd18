"""The propositionizer quality report written out: `propositions_per_passage.csv`,
`propositions_report.csv` / `.md` / `.json` (`write_report`) and W&B tables + scalars
(`log_report`), from `report.propositions`' rows and aggregate table."""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from densex.metrics.propositions import STOPWORDS_NAME
from densex.report.wandb_log import log_table
from densex.utils.io import atomic_open, write_json
from densex.utils.records import Record

__all__ = ["log_report", "report_markdown", "write_report"]

PER_PASSAGE_FILE = "propositions_per_passage.csv"
REPORT_FILE = "propositions_report"  # .csv / .md / .json

PER_PASSAGE_COLUMNS = (
    "system",
    "passage_id",
    "title",
    "set_f1",
    "precision",
    "recall",
    "n_propositions",
    "ref_n_propositions",
    "words_per_proposition",
    "ref_words_per_proposition",
    "coverage",
    "unsupported",
    "passage_content_words",
    "proposition_content_words",
    "parse",
    "fallback_reason",
    "repairs",
    "cut",
    "unsupported_words",
)
TABLE_COLUMNS = (
    "system",
    "n_passages",
    "set_f1",
    "precision",
    "recall",
    "props_per_passage",
    "ref_props_per_passage",
    "props_ratio",
    "words_per_prop",
    "ref_words_per_prop",
    "words_ratio",
    "coverage",
    "unsupported",
    "parse_rate",
    "parsed_strict",
    "repaired",
    "fallbacks",
    "hit_max_new_tokens",
)


def _f(v: Any, digits: int = 3, percent: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, (bool, int)):
        return str(v)
    return f"{100 * v:.1f}" if percent else f"{v:.{digits}f}"


def report_markdown(table: Sequence[Record], notes: Sequence[str] = ()) -> str:
    """GitHub Markdown of `aggregate`'s table (shares in percent), then `notes` as bullets."""
    header = [
        "system", "passages", "set-F1", "P", "R", "props / passage", "words / prop",
        "coverage %", "unsupported %", "parse rate %", "fallbacks", "cut",
    ]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for r in table:
        cells = [
            str(r["system"]),
            str(r["n_passages"]),
            _f(r["set_f1"]),
            _f(r["precision"]),
            _f(r["recall"]),
            _f(r["props_per_passage"], 2),
            _f(r["words_per_prop"], 1),
            _f(r["coverage"], percent=True),
            _f(r["unsupported"], percent=True),
            _f(r["parse_rate"], percent=True),
            _f(r["fallbacks"]),
            _f(r["hit_max_new_tokens"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    out = "\n".join(lines) + "\n"
    if notes:
        out += "\n" + "".join(f"- {n}\n" for n in notes)
    return out


def _csv(path: Path, columns: Sequence[str], rows: Sequence[Record]) -> Path:
    with atomic_open(path) as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in columns})
    return path


def write_report(
    out_dir: str | os.PathLike,
    rows: Sequence[Record],
    table: Sequence[Record],
    summary: Record,
    notes: Sequence[str] = (),
) -> dict[str, Path]:
    """Write the per-passage CSV, the aggregate table (CSV, Markdown) and `summary` + table as
    JSON into `out_dir`, each atomically; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "per_passage": _csv(out / PER_PASSAGE_FILE, PER_PASSAGE_COLUMNS, rows),
        "csv": _csv(out / f"{REPORT_FILE}.csv", TABLE_COLUMNS, table),
    }
    md = out / f"{REPORT_FILE}.md"
    title = summary.get("title") or "Propositionizer quality"
    with atomic_open(md) as f:
        f.write(f"# {title}\n\n" + report_markdown(table, notes))
    paths["md"] = md
    paths["json"] = out / f"{REPORT_FILE}.json"
    write_json(
        paths["json"],
        {**summary, "stopwords": STOPWORDS_NAME, "table": [dict(r) for r in table]},
    )
    return paths


def log_report(run: Any, table: Sequence[Record], rows: Sequence[Record] = ()) -> None:
    """Log the aggregate table (`propositions_report`), the per-passage rows
    (`propositions_per_passage`) and each system's scalars (`{system}/{metric}`) to a W&B run."""

    metrics = {
        f"{r['system']}/{k}": float(v)
        for r in table
        for k, v in r.items()
        if k != "system" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    run.log(metrics)
    run.summary.update(metrics)
    log_table(run, "propositions_report", [{c: r.get(c) for c in TABLE_COLUMNS} for r in table])
    if rows:
        cols = list(PER_PASSAGE_COLUMNS)
        log_table(
            run, "propositions_per_passage", [{c: _cell(r.get(c)) for c in cols} for r in rows]
        )


def _cell(v: Any) -> Any:
    """W&B table cells of one type per column: bools as strings (None stays None, which W&B
    tables accept in any column, as the aggregate table's empty parse columns show)."""
    return str(v) if isinstance(v, bool) else v
