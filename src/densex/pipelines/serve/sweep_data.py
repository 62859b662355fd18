"""A finished evaluate sweep, read for the sweep browser.

Contract: `SweepData.load(sweep_dir)` reads each cell's `results.jsonl` and `per_question.jsonl`
(`report.table2.find_results`, `analysis.per_question.read_per_question`), `table2.md`,
`winloss.csv` and the answer-recall plot when present; a sweep without cells is a `DataError`.
`filter(found, missed, k, answer_type, length)` lists the questions that cell `found` answers
in its top k and cell `missed` does not (either may be empty: no condition), with the answer
type and length bucket of `analysis.per_question`. Cells are named by granularity, or by
`granularity/retriever/dataset` when the sweep varies more than the granularity.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from densex.analysis.per_question import answer_type, length_bucket, read_per_question
from densex.report.table2 import find_results, load_results
from densex.utils.io import DataError

PLOT = "answer_recall_by_words.png"
NAME_FIELDS = ("granularity", "retriever", "dataset", "corpus", "index")


@dataclass
class SweepData:
    """The cells of one sweep (name -> per-question rows by id) and its summary files."""

    root: Path
    cells: dict[str, dict[str, dict[str, Any]]]
    ks: list[int]
    table2_md: str | None = None
    winloss: list[dict[str, str]] = field(default_factory=list)
    plot: Path | None = None

    @classmethod
    def load(cls, sweep_dir: str | os.PathLike) -> SweepData:
        root = Path(sweep_dir)
        rows = load_results(find_results(root)) if root.is_dir() else []
        rows = [r for r in rows if (Path(r["job_dir"]) / "per_question.jsonl").exists()]
        if not rows:
            raise DataError(root, None, None, "no cell with results.jsonl and per_question.jsonl")
        varying = [f for f in NAME_FIELDS if len({str(r.get(f)) for r in rows}) > 1] or [
            "granularity"
        ]
        if "granularity" not in varying:
            varying.insert(0, "granularity")
        cells: dict[str, dict[str, dict[str, Any]]] = {}
        for r in rows:
            name = "/".join(str(r.get(f)) for f in varying)
            if name in cells:  # same labels in two sweeps under one folder: say which job
                name += f" ({Path(r['job_dir']).relative_to(root)})"
            cells[name] = read_per_question(r["job_dir"])
        first = next(iter(next(iter(cells.values())).values()), {})
        ks = sorted(int(c[4:]) for c in first if c.startswith("hit@"))
        winloss: list[dict[str, str]] = []
        if (root / "winloss.csv").exists():
            with open(root / "winloss.csv", newline="", encoding="utf-8") as f:
                winloss = list(csv.DictReader(f))
        table2 = root / "table2.md"
        plot = root / PLOT
        return cls(root, cells, ks, table2.read_text(encoding="utf-8") if table2.exists() else None,
                   winloss, plot if plot.exists() else None)  # fmt: skip

    def question(self, qid: str) -> dict[str, Any] | None:
        """The question's row in the first cell that has it, with each cell's first hit rank."""
        rows = {name: cell[qid] for name, cell in self.cells.items() if qid in cell}
        if not rows:
            return None
        row = dict(next(iter(rows.values())))
        row["ranks"] = {name: r.get("first_hit_rank") for name, r in rows.items()}
        return row

    def filter(
        self, found: str = "", missed: str = "", k: int | None = None, answer_kind: str = "",
        length: str = "",
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Questions `found` hits and `missed` misses at `k` (a `ValueError` names a bad
        argument), of the answer type and length bucket given (empty: any)."""
        k = k or (self.ks[0] if self.ks else None)
        if k not in self.ks:
            raise ValueError(f"k must be one of {self.ks}, got {k}")
        for label, name in (("found", found), ("missed", missed)):
            if name and name not in self.cells:
                raise ValueError(f"{label}: unknown cell {name!r}; cells: {', '.join(self.cells)}")
        base = self.cells[found or missed or next(iter(self.cells))]
        out = []
        for qid, row in base.items():
            if found and not self.cells[found][qid].get(f"hit@{k}"):
                continue
            if missed and (
                qid not in self.cells[missed] or self.cells[missed][qid].get(f"hit@{k}")
            ):
                continue
            kind, bucket = answer_type(row.get("answers") or []), length_bucket(row["question"])
            if (answer_kind and kind != answer_kind) or (length and bucket != length):
                continue
            out.append({**row, "answer_type": kind, "length": bucket})
        return out

    def buckets(self) -> tuple[list[str], list[str]]:
        """The answer types and length buckets present, in a stable order."""
        base = next(iter(self.cells.values())).values()
        kinds = sorted({answer_type(r.get("answers") or []) for r in base})
        lengths = sorted(
            {length_bucket(r["question"]) for r in base},
            key=lambda b: int(b.split("-")[0].split("+")[0]),
        )
        return kinds, lengths
