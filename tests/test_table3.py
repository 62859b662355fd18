"""Table 3 (EM@l by retriever x granularity x dataset) and the answer-recall figure."""

from __future__ import annotations

import csv
import json

import numpy as np

from densex.qa.cell import write_curve
from densex.report.plots import plot_answer_recall
from densex.report.table3 import table3_rows, write_table3


def _rows():
    rows = []
    for r, base in (("gtr", 30.0), ("dpr", 20.0)):
        for gi, g in enumerate(("proposition", "passage", "sentence")):
            for d in ("eq", "nq"):
                for b in (100, 500):
                    if r == "dpr" and d == "eq" and g == "sentence":
                        continue  # a missing cell: no average for that row
                    em = base + gi + (10 if b == 500 else 0) + (1 if d == "nq" else 0)
                    rows.append(
                        {
                            "retriever": r,
                            "granularity": g,
                            "dataset": d,
                            "budget": b,
                            f"em@{b}": em,
                            "recall@20": 50.0,
                        }
                    )
    return rows


def test_layout_order_and_average():
    header, body = table3_rows(_rows())
    assert header == [
        "retriever",
        "granularity",
        "nq EM@100",
        "nq EM@500",
        "eq EM@100",
        "eq EM@500",
        "Avg EM@100",
        "Avg EM@500",
    ]
    # paper order: retrievers DPR before GTR, granularities passage, sentence, proposition
    assert [(b[0], b[1]) for b in body] == [
        ("dpr", "passage"),
        ("dpr", "sentence"),
        ("dpr", "proposition"),
        ("gtr", "passage"),
        ("gtr", "sentence"),
        ("gtr", "proposition"),
    ]
    gtr_prop = body[5]
    assert gtr_prop[2:] == [31.0, 41.0, 30.0, 40.0, 30.5, 40.5]
    assert body[1][4] is None and body[1][6] is None  # dpr sentence: no EQ, so no average


def test_write_table3_files(tmp_path):
    md = write_table3(_rows(), tmp_path)
    assert md == tmp_path / "table3.md"
    text = md.read_text()
    assert (
        "| Retriever | Granularity | NQ EM@100 | NQ EM@500 | EQ EM@100 | EQ EM@500 | Avg EM@100 |"
        in text
    )
    assert "| GTR | passage | 32.0 | 42.0 |" in text  # retriever name once per group
    assert "|  | sentence | **33.0** | **43.0** |" in text  # best per retriever and column: bold
    assert "|  | sentence | **23.0** | **33.0** | – | – | – | – |" in text  # DPR: no EQ
    with (tmp_path / "table3.csv").open() as f:
        rows = list(csv.reader(f))
    # the report vocabulary (densex.report.naming), as in the Markdown
    assert rows[0][:3] == ["retriever", "granularity", "NQ EM@100"]
    assert rows[2] == ["DPR", "sentence", "23.0000", "33.0000", "", "", "", ""]


def test_no_em_no_table(tmp_path):
    rows = [{"retriever": "gtr", "granularity": "passage", "dataset": "nq", "recall@20": 1.0}]
    assert write_table3(rows, tmp_path) is None
    assert not (tmp_path / "table3.md").exists()


def test_plot_answer_recall_from_job_dirs(tmp_path):
    dirs = []
    for i, g in enumerate(("passage", "sentence", "proposition", "proposition")):
        d = tmp_path / str(i)
        d.mkdir()
        write_curve(d / "answer_recall_by_words.csv", np.linspace(0, 40 + 5 * i, 501), step=10)
        row = {
            "retriever": "gtr",
            "granularity": g,
            "dataset": "squad-open",
            "budget": 100 + 400 * (i == 3),
        }
        (d / "results.jsonl").write_text(json.dumps(row) + "\n")
        dirs.append(d)
    out = plot_answer_recall(dirs, tmp_path / "fig" / "recall.png")
    assert out == tmp_path / "fig" / "recall.png" and out.stat().st_size > 5000
    assert plot_answer_recall([tmp_path / "nothing"], tmp_path / "x.png") is None


def test_table3_keeps_conditions_apart_and_rejects_true_duplicates():
    import pytest

    from densex.utils.io import DataError

    base = {"retriever": "gtr", "granularity": "passage", "dataset": "nq", "budget": 100}
    rows = [
        {**base, "reader": "unifiedqa", "index": "flat", "em@100": 30.0},
        {**base, "reader": "unifiedqa", "index": "hnsw", "em@100": 20.0},
        {**base, "reader": "tiny", "index": "flat", "em@100": 5.0},
    ]
    header, body = table3_rows(rows)
    assert header[:4] == ["retriever", "index", "reader", "granularity"]
    assert [b[:5] for b in body] == [
        ["gtr", "flat", "unifiedqa", "passage", 30.0],
        ["gtr", "hnsw", "unifiedqa", "passage", 20.0],
        ["gtr", "flat", "tiny", "passage", 5.0],
    ]
    # the same cell twice (a sweep over something the table does not show): an error, not
    # "the later row wins"
    dup = [{**rows[0], "job_dir": "s/0"}, {**rows[0], "em@100": 31.0, "job_dir": "s/1"}]
    with pytest.raises(DataError, match=r"same Table 3 cell.*also in s/0"):
        table3_rows(dup)


def test_write_table3_with_a_varying_condition(tmp_path):
    rows = [
        {
            "retriever": "gtr",
            "granularity": g,
            "dataset": "nq",
            "index": i,
            "budget": 100,
            "em@100": em,
        }
        for g, i, em in [
            ("passage", "flat", 30.0),
            ("proposition", "flat", 35.0),
            ("passage", "hnsw", 28.0),
            ("proposition", "hnsw", 26.0),
        ]
    ]
    text = write_table3(rows, tmp_path).read_text()
    assert "| Retriever | Index | Granularity | NQ EM@100 | Avg EM@100 |" in text
    assert "| GTR | flat | passage | 30.0 | 30.0 |" in text
    assert "|  |  | proposition | **35.0** | **35.0** |" in text
    assert "| GTR | hnsw | passage | **28.0** | **28.0** |" in text  # best within its block
    with (tmp_path / "table3.csv").open() as f:
        lines = list(csv.reader(f))
    assert lines[0][:3] == ["retriever", "index", "granularity"]
    assert lines[3] == ["GTR", "hnsw", "passage", "28.0000", "28.0000"]


def test_answer_recall_panels_keep_indexes_apart_and_share_budgets(tmp_path):
    from densex.report.plots import answer_recall_panels

    dirs = []
    for i, (g, index, budget) in enumerate(
        [("passage", "flat", 100), ("passage", "flat", 500), ("passage", "hnsw", 100)]
    ):
        d = tmp_path / str(i)
        d.mkdir()
        write_curve(d / "answer_recall_by_words.csv", np.full(501, 10.0 * (i + 1)), step=100)
        row = {
            "retriever": "gtr",
            "granularity": g,
            "dataset": "nq",
            "corpus": "wiki",
            "index": index,
            "budget": budget,
        }
        (d / "results.jsonl").write_text(json.dumps(row) + "\n")
        dirs.append(d)
    panels = answer_recall_panels(dirs)
    assert set(panels) == {("gtr", "nq", "wiki", "flat"), ("gtr", "nq", "wiki", "hnsw")}
    # the budget-500 job of the flat index shares the first job's curve
    assert panels[("gtr", "nq", "wiki", "flat")]["passage"][1][0] == 10.0
    assert panels[("gtr", "nq", "wiki", "hnsw")]["passage"][1][0] == 30.0
    out = plot_answer_recall(dirs, tmp_path / "recall.png")
    assert out is not None and out.stat().st_size > 5000
