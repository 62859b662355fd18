"""One vocabulary across every result file (Markdown, CSV, W&B), defined in
`densex.report.naming`; honest significance columns; no all-zero win/loss sections.

A small sweep of three cells (passage, sentence, proposition; per-question hits drawn so the
cells differ at R@1 and not at R@20, EM@100 from a reader, MRR@10 and nDCG@10 from gold
passages) goes through the sweep callbacks' writers; every label they write is checked against
the vocabulary. Breaking one writer on purpose (it writes a config key instead of the label)
must be caught: the check is what a renamed metric in one writer would fail.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from densex.analysis import sweep_significance, sweep_winloss
from densex.analysis.sweep import analyze_sweep
from densex.report import aggregate, naming, table2, wandb_log
from densex.report.naming import GAIN_LABEL, METRIC_LABEL

N = 120
GRANULARITIES = ("passage", "sentence", "proposition")
TOKEN = re.compile(r"(?<![\w/.])([A-Za-z_]+@\d+)\b")  # a metric name: R@5, hit@5, recall@5 ...


def _sweep(root: Path) -> None:
    """Three cells of one retriever (gtr) on one dataset (nq), real per-question layout."""
    rng = np.random.default_rng(0)
    first = rng.integers(1, 8, N)  # passage: first answer-bearing rank
    for i, g in enumerate(GRANULARITIES):
        rank = np.where(rng.random(N) < 0.25 * i, 1, first)  # finer units: more at rank 1
        words = rank * 40
        em = (rank == 1) & (rng.random(N) < 0.6)
        pq = [
            {"id": f"q{j}", "question": f"Who wrote book {j}?", "answers": ["Jane Austen"],
             "first_hit_rank": int(rank[j]), "hit@1": bool(rank[j] <= 1),
             "hit@5": bool(rank[j] <= 5), "hit@20": True, "words_to_answer": int(words[j]),
             "em@100": float(em[j]), "gold_rank": int(rank[j]), "rr@10": 1.0 / rank[j],
             "ndcg@10": 1.0 / np.log2(rank[j] + 1)}
            for j in range(N)
        ]  # fmt: skip
        row = {"corpus": "c", "index": "flat", "retriever": "gtr", "granularity": g,
               "dataset": "nq", "reader": "tiny", "budget": 100,
               **{f"recall@{k}": 100 * float(np.mean([q[f"hit@{k}"] for q in pq]))
                  for k in (1, 5, 20)},
               "answer_recall@100": 100 * float(np.mean(words <= 100)),
               "em@100": 100 * float(np.mean(em)), "mrr@10": 100 * float(np.mean(1 / rank)),
               "ndcg@10": 50.0, "gold_recall@5": 90.0}  # fmt: skip
        d = root / f"{i}_granularity={g}"
        d.mkdir(parents=True)
        (d / "results.jsonl").write_text(json.dumps(row) + "\n")
        (d / "per_question.jsonl").write_text("".join(json.dumps(q) + "\n" for q in pq))


class _Run:
    """Stands in for a W&B run: what each `log` call got, W&B tables as (columns, rows)."""

    def __init__(self) -> None:
        self.logged: dict[str, Any] = {}
        self.summary: dict[str, Any] = {}

    def log(self, data: dict) -> None:
        self.logged.update(data)

    def finish(self) -> None:
        pass


def _write_everything(root: Path, monkeypatch) -> _Run:
    """The sweep's files (the two callbacks' writers) and what W&B would get."""
    _sweep(root)
    run = _Run()
    monkeypatch.setattr(aggregate, "init_run", lambda *a, **k: run)
    aggregate.aggregate_sweep(root, {})
    analyze_sweep(root, n_resamples=500, seed=0)
    row = json.loads(next(root.glob("0_*/results.jsonl")).read_text())
    wandb_log.log_cell(run, row)
    return run


def _labels_in(text: str) -> set[str]:
    return set(TOKEN.findall(text))


def vocabulary_problems(root: Path, run: _Run) -> list[str]:
    """Every label of the sweep's files and W&B tables that is not in the vocabulary."""
    problems = []
    texts = {p.name: p.read_text(encoding="utf-8") for p in root.glob("*.md")}
    texts |= {p.name: p.read_text(encoding="utf-8") for p in root.glob("*.csv")}
    for key, value in run.logged.items():
        if hasattr(value, "columns"):  # a wandb.Table
            texts[f"wandb:{key}"] = (
                ",".join(map(str, value.columns))
                + "\n"
                + "\n".join(",".join(map(str, r)) for r in value.data)
            )
        else:
            texts[f"wandb:{key}"] = key
    for name, text in texts.items():
        for token in sorted(_labels_in(text)):
            if not METRIC_LABEL.match(token):
                problems.append(f"{name}: metric {token!r}")
        for raw in ("gtr", "gain"):  # config keys where the label (GTR, Δ prop − psg) belongs
            if re.search(rf"(?<![\w-]){raw}(?![\w-])", text):
                problems.append(f"{name}: {raw!r}")
    for name in ("table2.csv", "table2_full.csv", "significance.csv", "winloss.csv"):
        with open(root / name, encoding="utf-8") as f:
            for r in csv.DictReader(f):
                if r.get("retriever") not in naming.RETRIEVER_LABEL.values():
                    problems.append(f"{name}: retriever {r.get('retriever')!r}")
    return problems


def test_every_writer_uses_the_one_vocabulary(tmp_path, monkeypatch):
    run = _write_everything(tmp_path, monkeypatch)
    assert vocabulary_problems(tmp_path, run) == []
    # the labels are there, the same in every file
    md, csv_text = (tmp_path / "table2.md").read_text(), (tmp_path / "table2.csv").read_text()
    for text in (md, csv_text, (tmp_path / "significance.csv").read_text()):
        assert "R@1" in text and "GTR" in text
    assert f"| {GAIN_LABEL} |" in md and f",{GAIN_LABEL}," in csv_text
    assert {"R@1", "R@5", "AR@100", "MRR@10"} <= set(run.logged) | {
        c.split(" ")[-1] for c in run.logged["table2_full"].columns
    }
    assert "EM@100" in (tmp_path / "table3.csv").read_text().splitlines()[0]


def _identity(row):
    return dict(row)


@pytest.mark.parametrize(
    "module, name, broken",
    [
        (sweep_winloss, "labelled", _identity),  # winloss.csv/md with hit@5 and gtr
        (sweep_significance, "labelled", _identity),  # significance.csv with hit@1
        (table2, "column_label", lambda c: c.replace("R@", "recall@")),  # Table 2's header
        (wandb_log, "labelled", _identity),  # W&B: recall@5 and the gain row's key
    ],
)
def test_a_writer_off_the_vocabulary_is_caught(tmp_path, monkeypatch, module, name, broken):
    """One writer renamed on purpose: the check names that writer's file."""
    monkeypatch.setattr(module, name, broken)
    run = _write_everything(tmp_path, monkeypatch)
    problems = vocabulary_problems(tmp_path, run)
    assert problems, f"{module.__name__}.{name} broken, yet no problem found"


def test_significance_columns_are_honest(tmp_path, monkeypatch):
    """One decision rule (randomization decides, bootstrap CI beside it), stated in Table 2;
    `randomization_resamples` says `exact` only where every sign flip was enumerated; reader
    and budget columns only on EM@l rows' files; every reported metric tested."""
    _write_everything(tmp_path, monkeypatch)
    with open(tmp_path / "significance.csv", encoding="utf-8") as f:
        sig = list(csv.DictReader(f))
    assert {r["metric"] for r in sig} == {
        "R@1", "R@5", "R@20", "AR@100", "MRR@10", "nDCG@10", "EM@100",
    }  # fmt: skip
    for r in sig:
        assert (
            r["randomization_resamples"] in ("exact", "500") and r["bootstrap_resamples"] == "500"
        )
        assert r["significant"] == str(float(r["p_randomization"]) < 0.05)
        assert bool(r["reader"]) == bool(r["budget"]) == (r["metric"] == "EM@100")
    exact = {r["randomization_resamples"] for r in sig}
    assert exact == {"exact", "500"}  # R@20 (no question differs) is exact, R@1 is sampled
    assert "p_bootstrap" not in sig[0]  # one p-value decides
    md = (tmp_path / "table2.md").read_text()
    assert md.count("Decision rule: ") == 1 and "paired randomization test" in md
    assert "| gtr |" not in md and "p (randomization)" in md
    r1 = next(line for line in md.splitlines() if line.startswith("|  | proposition |"))
    assert "†" in r1.split("|")[3]  # proposition's R@1 (first column) is marked


def test_winloss_md_has_no_all_zero_section(tmp_path, monkeypatch):
    _write_everything(tmp_path, monkeypatch)
    md = (tmp_path / "winloss.md").read_text()
    assert "### GTR NQ: proposition vs passage, R@1" in md
    sections = md.split("\n### ")[1:]
    for s in sections:
        rows = [line.split("|") for line in s.splitlines() if line.startswith("| all |")]
        assert rows and any(int(r[4]) or int(r[5]) for r in rows), s[:80]
    assert "No question differs (no table): " in md and "R@20" in md.split("No question")[1]


def test_cell_folder_and_wandb_run_name_say_the_overrides():
    """A multirun cell's folder is `<job number>_<its overrides>` (conf/hydra/evaluate.yaml),
    paths and the experiment's name left out; its W&B run is named from the same overrides."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from densex.pipelines.evaluate.outputs import run_name
    from helpers.config import compose_config

    cfg = compose_config("evaluate", "experiment=demo", "granularity=sentence",
                         "paths.cache_dir=/x/y", "budget=500", hydra=True)  # fmt: skip
    sweep = OmegaConf.to_container(cfg.hydra.sweep, resolve=False)
    assert (
        sweep["subdir"] == "${hydra.job.num}_${densex.cell_dirname:${hydra.job.override_dirname}}"
    )
    assert cfg.hydra.job.override_dirname == "budget=500,granularity=sentence"
    HydraConfig.instance().set_config(cfg)
    try:
        row = {"retriever": "minilm", "granularity": "sentence", "dataset": "demo"}
        assert run_name(row) == "minilm-sentence-demo-budget=500"
    finally:
        HydraConfig.instance().cfg = None  # no Hydra job for the tests after this one


def test_a_long_cell_folder_name_is_cut_and_stays_apart():
    """A cell whose overrides would name a folder past the file system's 255 characters (a
    fusion's member list beside a decoding's ten settings) gets a name under the limit that
    ends in a hash of the whole, so two such cells differ; short names are kept as they are."""
    from densex.utils.config import CELL_NAME_LIMIT, cell_dirname

    decode = ",".join(f"propositionizer.setting_{i}=value_{i}" for i in range(10))
    a = "granularity.members=[sentence,proposition],granularity=mixed," + decode
    b = a.replace("value_9", "value_8")
    assert len(a) > 255 and len(cell_dirname(a)) <= CELL_NAME_LIMIT
    assert cell_dirname(a) != cell_dirname(b) and cell_dirname(a).startswith("granularity.")
    assert cell_dirname(a).rsplit(",", 1)[1].startswith("~")
    assert cell_dirname("budget=500,granularity=sentence") == "budget=500,granularity=sentence"
