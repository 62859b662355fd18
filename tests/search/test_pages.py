"""The explorer's highlighting and the sweep browser's data: its filters count the same
questions as the sweep analysis's `winloss.csv` (written by another implementation)."""

from __future__ import annotations

import csv

import pytest

from densex.pipelines.serve.pages import highlight, markdown_table
from densex.pipelines.serve.sweep_data import SweepData


def test_highlight_nests_answers_in_one_unit_mark_and_escapes():
    text = "In 1312 it received a royal <charter> from the king."
    html = str(highlight(text, (3, 36), ["1312", "royal", "king"], grey_context=True))
    assert html.count('<mark class="unit">') == 1 and html.count("</mark>") == 1
    assert html == (
        '<span class="context">In </span><mark class="unit"><u class="answer">1312</u> it '
        'received a <u class="answer">royal</u> &lt;charter</mark><span class="context">&gt; '
        'from the <u class="answer">king</u>.</span>'
    )
    assert str(highlight(text, None, None)) == text.replace("<", "&lt;").replace(">", "&gt;")


def test_markdown_table_reads_the_first_pipe_table():
    md = "# T\n\n| a | b |\n|---|---:|\n| 1 | 2 |\n\nnotes\n| x |\n"
    assert markdown_table(md) == [["a", "b"], ["1", "2"]]
    assert markdown_table(None) == []


def test_sweep_filters_agree_with_winloss(demo_sweep):
    sweep_dir, _ = demo_sweep
    sweep = SweepData.load(sweep_dir)
    assert list(sweep.cells) == ["passage", "sentence", "proposition"] and sweep.ks == [1, 5, 20]
    assert sweep.plot is not None and markdown_table(sweep.table2_md)[0][0]
    with open(sweep_dir / "winloss.csv", newline="") as f:
        rows = [
            r
            for r in csv.DictReader(f)
            if r["bucketing"] in ("all", "answer type", "question length")
        ]
    checked = 0
    for r in rows:
        k = int(r["metric"].split("@")[1])
        kind = r["bucket"] if r["bucketing"] == "answer type" else ""
        length = r["bucket"] if r["bucketing"] == "question length" else ""
        wins = sweep.filter(r["a"], r["b"], k, kind, length)
        losses = sweep.filter(r["b"], r["a"], k, kind, length)
        assert (len(wins), len(losses)) == (int(r["wins"]), int(r["losses"])), r
        checked += 1
    assert checked >= 3 * 2 * 5  # 3 pairs, 2 cut-offs, several buckets
    assert any(int(r["wins"]) for r in rows if r["a"] == "proposition" and r["b"] == "passage")


def test_sweep_filter_names_a_bad_argument(demo_sweep):
    sweep = SweepData.load(demo_sweep[0])
    with pytest.raises(ValueError, match="unknown cell 'words'"):
        sweep.filter("words", "passage", 5)
    with pytest.raises(ValueError, match=r"k must be one of \[1, 5, 20\]"):
        sweep.filter("proposition", "passage", 7)
