"""The propositionizer's learning curve: validation quality and retrieval against the number of
training articles, from training runs that differ only in `data.train_articles`.

Each RUN is a `train.py experiment=propositionizer-copy-cpu` run folder. The script reads the
run's exported step (`train_summary.json`: `best_global_step`), the retrieval validation the
callback wrote for that step (`val_propositions/*step=NNNNNN.json`: set-F1, R@1/5/20, AR@100
on the short-answer questions, each beside the sentences' with a paired test) and the run's
training articles and passages (its `.hydra/config.yaml`: `data.sources`, `data.train_articles`,
read with the splits train.py uses). It writes `OUT.md` (one row per run, fewest articles
first, then the sentences' row), `OUT.csv` and `OUT.png` (set-F1, R@1, R@5 and AR@100 against
articles, the sentences' values as dashed lines):

    python train.py experiment=propositionizer-copy-cpu data.train_articles=27 \
        trainer.val_check_interval=1500 hydra.run.dir=LC27     # likewise 80; all 165: RUN
    python scripts/learning_curve.py LC27 LC80 RUN --out docs/img/learning_curve
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from densex.pipelines.train.sources import pair_sources
from densex.propositionizer.sources import first_articles, read_sources
from densex.utils.io import DataError

METRICS = ("set-F1", "R@1", "R@5", "R@20", "AR@100")
KEYS = {"set-F1": "val/ps_set_f1", "R@1": "val/R@1", "R@5": "val/R@5", "R@20": "val/R@20",
        "AR@100": "val/AR@100"}  # fmt: skip
TESTED = ("R@1", "R@5", "AR@100")  # paired tests against the sentences


def validation_file(run: Path) -> Path:
    """The retrieval validation of the run's exported step; a DataError naming the file
    when the run did not finish or its step was not validated."""
    summary = run / "train_summary.json"
    if not summary.is_file():
        raise DataError(summary, None, None, "missing: the run has not finished")
    step = json.loads(summary.read_text())["best_global_step"]
    found = sorted((run / "val_propositions").glob(f"*step={step:06d}.json"))
    if not found:
        raise DataError(run / "val_propositions", None, None, f"no validation of step {step}")
    return found[-1]


def training_size(run: Path) -> tuple[int, int]:
    """(articles, passages) the run trained on: its config's sources split as train.py does."""
    data = OmegaConf.load(run / ".hydra" / "config.yaml").data
    pairs = read_sources(pair_sources(data.sources)).train
    if data.get("train_articles"):
        pairs = first_articles(pairs, int(data.train_articles))
    return len({p["title"] for p in pairs}), len({p["id"] for p in pairs})


def run_point(run: Path) -> dict[str, Any]:
    """One row: the run's training size, its exported step's validation metrics and paired
    tests, and the sentences' metrics on the same questions."""
    path = validation_file(run)
    result = json.loads(path.read_text())
    metrics, tests = result["metrics"], result["paired_tests"]
    articles, passages = training_size(run)
    row: dict[str, Any] = {"run": str(run), "articles": articles, "passages": passages}
    for name in METRICS:
        row[name] = metrics[KEYS[name]]
        row[f"sentence {name}"] = metrics.get(KEYS[name].replace("val/", "val/sentence_"))
    for name in TESTED:
        t = tests[name]
        row[f"{name} diff"], row[f"{name} ci"] = t["diff"], (t["ci_low"], t["ci_high"])
        row[f"{name} p"] = t["p_randomization"]
    row["props/passage"] = metrics.get("val/props_per_passage")
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table: one row per run, then the sentences' (the same on every run's questions)."""
    head = "| training articles | passages | set-F1 | props/passage | R@1 | R@5 | R@20 | AR@100 |"
    lines = [head, "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        tested = {n: f"{r[n]:.1f} ({r[n + ' diff']:+.1f} [{r[n + ' ci'][0]:+.1f}, "
                     f"{r[n + ' ci'][1]:+.1f}])" for n in TESTED}  # fmt: skip
        lines.append(f"| {r['articles']} | {r['passages']:,} | {r['set-F1']:.3f} | "
                     f"{r['props/passage']:.1f} | {tested['R@1']} | {tested['R@5']} | "
                     f"{r['R@20']:.1f} | {tested['AR@100']} |")  # fmt: skip
    s = rows[-1]
    lines.append(f"| sentences | | | | {s['sentence R@1']:.1f} | {s['sentence R@5']:.1f} | "
                 f"{s['sentence R@20']:.1f} | {s['sentence AR@100']:.1f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], out_png: Path) -> None:
    """Four panels against training articles, the sentences' value dashed (written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(14, 3.2))
    x = [r["articles"] for r in rows]
    for ax, name in zip(axes, ("set-F1", "R@1", "R@5", "AR@100")):
        ax.plot(x, [r[name] for r in rows], "o-", color="tab:green", label="student")
        if rows[-1][f"sentence {name}"] is not None:
            ax.axhline(rows[-1][f"sentence {name}"], ls="--", color="tab:orange", label="sentences")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(x, [str(v) for v in x])
        ax.set_xlabel("training articles")
        ax.set_title(name)
    axes[0].legend(loc="lower right")
    fig.tight_layout()
    tmp = out_png.with_name(f".{out_png.name}.tmp.png")
    fig.savefig(tmp, dpi=150)
    os.replace(tmp, out_png)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="training run folders")
    parser.add_argument("--out", type=Path, required=True, help="OUT.md, OUT.csv, OUT.png")
    args = parser.parse_args(argv)
    rows = sorted((run_point(run) for run in args.runs), key=lambda r: r["articles"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table = markdown(rows)
    args.out.with_suffix(".md").write_text(table)
    with open(args.out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, args.out.with_suffix(".png"))
    print(table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
