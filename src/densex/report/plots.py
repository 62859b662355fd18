"""Paper figures: answer recall vs words (Figures 4/7) and recall by entity popularity (Figure 3)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from densex.qa.cell import CURVE_FILE, read_curve
from densex.report.naming import (
    DATASET_ORDER,
    GRANULARITY_ORDER,
    RETRIEVER_ORDER,
    order_index,
)
from densex.report.naming import display_name as _name
from densex.utils.io import DataError, read_jsonl
from densex.utils.logging import get_logger
from densex.utils.records import Record

log = get_logger(__name__)

COLORS = {"passage": "tab:blue", "sentence": "tab:orange", "proposition": "tab:green"}


def _label(value: Any) -> str:
    if isinstance(value, Mapping):  # a config node rather than its name
        value = value.get("name", "?")
    return str(value)


def job_labels(job_dir: str | os.PathLike) -> dict[str, str]:
    """retriever, granularity, dataset, corpus, index of a job, from its results.jsonl."""
    path = Path(job_dir) / "results.jsonl"
    rows = list(read_jsonl(path, required=("granularity",)))
    if not rows:
        raise DataError(path, None, None, "no result rows")
    last = rows[-1]
    keys = ("retriever", "granularity", "dataset", "corpus", "index")
    return {k: _label(last.get(k, "?")) for k in keys}


def _savefig(fig: Any, out_png: Path) -> Path:
    """Save through a temporary name so a half-written PNG never appears."""
    out_png.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_png.with_name(f".{out_png.name}.tmp.png")
    fig.savefig(tmp, dpi=150, bbox_inches="tight")
    os.replace(tmp, out_png)
    return out_png


Panel = tuple[str, str, str, str]  # retriever, dataset, corpus, index


def answer_recall_panels(
    job_dirs: Iterable[str | os.PathLike],
) -> dict[Panel, dict[str, tuple[list[int], list[float]]]]:
    """Each job's answer-recall curve under its panel and granularity (first job found wins:
    jobs differing only in budget or reader have the same curve)."""
    curves: dict[Panel, dict[str, tuple[list[int], list[float]]]] = {}
    for d in job_dirs:
        if not (Path(d) / CURVE_FILE).exists():
            continue
        lab = job_labels(d)
        key = (lab["retriever"], lab["dataset"], lab["corpus"], lab["index"])
        curves.setdefault(key, {}).setdefault(lab["granularity"], read_curve(Path(d) / CURVE_FILE))
    return curves


def _panel_order(key: Panel) -> tuple:
    """Panels in the paper's order: retriever, then dataset, then corpus and index."""
    return (
        order_index(key[0], RETRIEVER_ORDER),
        key[0],
        order_index(key[1], DATASET_ORDER),
        key[1],
        key[2],
        key[3],
    )


def plot_answer_recall(
    job_dirs: Iterable[str | os.PathLike],
    out_png: str | os.PathLike,
    budgets: Sequence[int] = (100, 500),
) -> Path | None:
    """One panel per (retriever, dataset, corpus, index), one line per granularity; None
    without curves. Corpus and index join the panel title when they vary in the sweep.

    Jobs that differ only in budget or reader share a curve (it depends on neither), so the
    first one found is drawn. The x-axis ends where the curves end; each word budget of
    `budgets` inside it is a dotted vertical line labelled `l = 100` (the paper's EM@l).
    """
    import matplotlib  # lazy: matplotlib only when plotting (Agg set before pyplot loads)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = answer_recall_panels(job_dirs)
    if not curves:
        return None
    keys = sorted(curves, key=_panel_order)
    varying = [i for i in (2, 3) if len({k[i] for k in keys}) > 1]
    ncols = min(len(keys), 3)
    nrows = math.ceil(len(keys) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.5 * ncols, 3.4 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        _draw_panel(ax, key, curves[key], budgets, [key[i] for i in varying])
    for ax in list(axes.flat)[len(keys) :]:
        ax.set_visible(False)
    fig.tight_layout()
    out = _savefig(fig, Path(out_png))
    plt.close(fig)
    return out


def _draw_panel(
    ax: Any,
    key: Panel,
    panel: Mapping[str, tuple[list[int], list[float]]],
    budgets: Sequence[int],
    extras: Sequence[str],
) -> None:
    """One panel of `plot_answer_recall`: a line per granularity, budget lines, title with
    the varying `extras` (corpus, index)."""
    x_max = max((max(w) for w, _ in panel.values() if w), default=0) or 1
    for gran in sorted(panel, key=lambda g: (order_index(g, GRANULARITY_ORDER), g)):
        words, recall = panel[gran]
        ax.plot(words, recall, label=_name(gran), color=COLORS.get(gran))
    ax.set_xlim(0, x_max)
    ax.set_ylim(0, 100)
    for l_words in sorted({int(b) for b in budgets}):
        if 0 < l_words < x_max:
            ax.axvline(l_words, color="grey", linestyle=":", linewidth=0.8)
            ax.annotate(
                f"l = {l_words}",
                (l_words, 2),
                xytext=(3, 0),
                textcoords="offset points",
                rotation=90,
                fontsize=7,
                color="dimgrey",
                va="bottom",
            )
    extra = ", ".join(extras)
    ax.set_title(f"{_name(key[0])} — {_name(key[1])}" + (f" ({extra})" if extra else ""))
    ax.set_xlabel("number of retrieved words")
    ax.set_ylabel("answer recall (%)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)


def plot_popularity(table: Sequence[Record], out_png: str | os.PathLike, k: int = 20) -> Path:
    """Recall@k per popularity bucket (x) with one line per granularity (Figure 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    grans = sorted(
        {r["granularity"] for r in table}, key=lambda g: (order_index(g, GRANULARITY_ORDER), g)
    )
    for gran in grans:
        rows = sorted((r for r in table if r["granularity"] == gran), key=lambda r: r["bucket"])
        ax.plot(
            [r["label"] for r in rows],
            [r[f"recall@{k}"] for r in rows],
            marker="o",
            label=_name(gran),
            color=COLORS.get(gran),
        )
    counts = {r["label"]: r["n"] for r in table}
    ax.set_xlabel(
        "entity popularity (mentions in BM25 top-1000) — questions per bucket: "
        + ", ".join(f"{lab}: {n}" for lab, n in counts.items()),
        fontsize=7,
    )
    ax.set_ylabel(f"recall@{k} (%)")
    ax.set_title("EntityQuestions: recall by entity popularity")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = _savefig(fig, Path(out_png))
    plt.close(fig)
    return out
