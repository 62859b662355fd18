"""Table 2 from results rows, the sweep callback on a sweep dir, W&B logging offline."""

from __future__ import annotations

import csv
import json
import math

import pytest
from omegaconf import OmegaConf

from densex.pipelines.callbacks import AggregateResults
from densex.pipelines.edge import wandb_settings
from densex.report.aggregate import aggregate_sweep
from densex.report.table2 import (
    find_results,
    load_results,
    table2_markdown,
    table2_rows,
    write_table2,
)
from densex.utils.io import DataError
from helpers.wandb_records import logged


def _row(retriever, granularity, dataset, r5, r20, **extra):
    return {
        "corpus": "c",
        "retriever": retriever,
        "granularity": granularity,
        "dataset": dataset,
        "recall@5": r5,
        "recall@20": r20,
        **extra,
    }


ROWS = [
    # given out of paper order on purpose
    _row("gtr", "proposition", "tqa", 70.0, 80.0),
    _row("gtr", "passage", "nq", 40.0, 60.0),
    _row("gtr", "passage", "tqa", 50.0, 70.0),
    _row("gtr", "proposition", "nq", 50.0, 65.0),
    _row("dpr", "sentence", "nq", 30.0, 50.0),
    _row("dpr", "passage", "nq", 20.0, 40.0),
]  # recall in percent, as evaluate writes it


def test_table2_layout_order_average_and_gain():
    table = table2_rows(ROWS)
    assert [(r["retriever"], r["granularity"]) for r in table] == [
        ("dpr", "passage"),
        ("dpr", "sentence"),
        ("gtr", "passage"),
        ("gtr", "proposition"),
        ("gtr", "gain"),
    ]
    assert list(table[0])[2:] == ["nq R@5", "nq R@20", "tqa R@5", "tqa R@20", "Avg R@5", "Avg R@20"]
    gtr_psg, gtr_prop, gain = table[2], table[3], table[4]
    assert gtr_psg["Avg R@5"] == pytest.approx(45.0)
    assert gtr_prop["Avg R@20"] == pytest.approx(72.5)
    assert gain["nq R@5"] == pytest.approx(10.0) and gain["tqa R@20"] == pytest.approx(10.0)
    # dpr has no tqa cell: its average is not comparable, so it is left empty
    assert math.isnan(table[0]["tqa R@5"]) and math.isnan(table[0]["Avg R@20"])
    md = table2_markdown(table)
    assert "| GTR | passage | 40.0 | 60.0 | 50.0 | 70.0 | 45.0 | 65.0 |" in md
    assert "|  | Δ prop − psg | +10.0 | +5.0 | +20.0 | +10.0 | +15.0 | +7.5 |" in md
    assert "| NQ R@5 | NQ R@20 | TQA R@5 |" in md


def test_table2_averages_repeated_cells_and_rejects_missing_metric():
    rows = [
        _row("dpr", "passage", "nq", 20.0, 40.0, budget=100),
        _row("dpr", "passage", "nq", 40.0, 40.0, budget=500),
    ]
    (line,) = table2_rows(rows)
    assert line["nq R@5"] == pytest.approx(30.0)
    bad = [{"retriever": "dpr", "granularity": "passage", "dataset": "nq", "recall@5": 10.0}]
    with pytest.raises(DataError, match="recall@20"):
        table2_rows(bad, ks=(5, 20))
    # no cut-offs asked for: every cut-off the rows have
    assert list(table2_rows(bad)[0])[2:] == ["nq R@5", "Avg R@5"]


def _write_sweep(root, rows):
    for i, row in enumerate(rows):
        d = root / str(i)
        d.mkdir(parents=True)
        (d / "results.jsonl").write_text(json.dumps(row) + "\n")


def test_find_and_load_results_in_job_order(tmp_path):
    _write_sweep(tmp_path, ROWS * 2)  # 12 jobs: "10" must sort after "2"
    paths = find_results(tmp_path)
    assert [p.parent.name for p in paths] == [str(i) for i in range(12)]
    rows = load_results(paths)
    assert rows[11]["job_dir"] == str(tmp_path / "11") and rows[11]["dataset"] == "nq"
    (tmp_path / "11" / "results.jsonl").write_text('{"retriever": "dpr", "dataset": "nq"}\n')
    with pytest.raises(DataError, match=r"11/results.jsonl:1: field 'granularity'"):
        load_results(find_results(tmp_path))


def test_write_table2_files(tmp_path):
    table = write_table2(ROWS, tmp_path)
    with open(tmp_path / "table2.csv") as f:
        got = list(csv.DictReader(f))
    assert len(got) == len(table) == 5
    # the report vocabulary (densex.report.naming): labels, not config keys
    assert got[4]["granularity"] == "Δ prop − psg" and float(got[4]["Avg R@5"]) == pytest.approx(
        15.0
    )
    assert float(got[3]["TQA R@5"]) == pytest.approx(70.0) and got[3]["retriever"] == "GTR"
    # every cut-off in one table (no answer-recall columns here: no second table)
    assert (tmp_path / "table2.md").read_text().count("\n| ") == 5 + 1
    with open(tmp_path / "table2_full.csv") as f:
        assert len(list(csv.DictReader(f))) == 5


def test_callback_aggregates_a_sweep_dir(tmp_path, capsys):
    _write_sweep(tmp_path, ROWS)
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}, "logger": {}})
    AggregateResults().on_multirun_end(config=cfg)
    md = (tmp_path / "table2.md").read_text()
    assert "| GTR | passage | 40.0 |" in md
    assert "Table 2" in capsys.readouterr().out
    assert not (tmp_path / "answer_recall_by_words.png").exists()  # no curves in these jobs


def test_callback_with_nothing_to_aggregate(tmp_path):
    assert aggregate_sweep(tmp_path)["rows"] == []
    assert not (tmp_path / "table2.md").exists()


def test_wandb_offline_run_logs_the_cell(tmp_path, monkeypatch):
    from densex.report.wandb_log import init_run, log_cell, log_table

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    # logger=none: no W&B at all
    assert init_run(wandb_settings(OmegaConf.create({"logger": {}}))) is None
    cfg = OmegaConf.create(
        {
            "out": str(tmp_path),
            "logger": {
                "wandb": {
                    "project": "densex-test",
                    "save_dir": "${out}",
                    "tags": ["t"],
                    "offline": False,
                }
            },
        }
    )
    assert wandb_settings(cfg)["save_dir"] == str(tmp_path)
    run = init_run(wandb_settings(cfg), name="cell", config={"retriever": "minilm"})
    log_cell(
        run,
        {"retriever": "minilm", "recall@5": 0.5, "n_questions": 2},
        [{"question": "q", "hit": True}],
        [0.25, 0.5],
        ([50, 100], [40.0, 60.0]),
    )
    log_table(run, "table2", table2_rows(ROWS))
    run.finish()
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    (log,) = run_dir.glob("run-*.wandb")
    got = logged(log)  # what W&B would upload, read back from its transaction log
    assert got["name"] == "cell" and got["config"]["retriever"] == "minilm"
    # a run name built from the command line's overrides never carries URL credentials
    secret_url = "propositionizer.base_url=http://me:urlpw-canary-1234@127.0.0.1:9/v1"
    run = init_run(wandb_settings(cfg), save_dir=tmp_path / "second", name="cell-" + secret_url)
    run.finish()
    (second,) = (tmp_path / "second" / "wandb").glob("offline-run-*/run-*.wandb")
    assert logged(second)["name"] == "cell-propositionizer.base_url=http://***@127.0.0.1:9/v1"
    assert b"urlpw-canary" not in second.read_bytes()
    # metrics under the tables' names (report.naming): R@5, not recall@5
    assert got["history"][0]["R@5"] == 0.5 and got["history"][0]["n_questions"] == 2
    assert got["summary"]["R@5"] == 0.5 and got["summary"]["n_questions"] == 2
    assert "retriever" not in got["summary"]  # strings are config, not metrics

    def table(key: str) -> dict:  # a logged table's file, under the run's files/
        (step,) = [h for h in got["history"] if f"{key}/path" in h]
        assert step[f"{key}/_type"] == "table-file"
        return json.loads((run_dir / "files" / step[f"{key}/path"]).read_text())

    assert table("samples") == {"columns": ["question", "hit"], "data": [["q", "True"]]}
    assert table("recall_curve_table")["data"] == [[1, 0.25], [2, 0.5]]
    assert table("answer_recall_by_words_table")["data"] == [[50, 40.0], [100, 60.0]]
    t2 = table("table2")
    rows = table2_rows(ROWS)
    assert len(t2["data"]) == len(rows)
    # the columns and labels of table2.csv (one vocabulary across md, csv and W&B)
    assert t2["columns"][:4] == ["retriever", "granularity", "NQ R@5", "NQ R@20"]
    gain = next(r for r in t2["data"] if r[1] == "Δ prop − psg")
    assert gain[:4] == ["GTR", "Δ prop − psg", 10.0, 5.0]


def test_callback_writes_table3_and_plot_when_jobs_have_them(tmp_path):
    from densex.qa.cell import write_curve

    rows = [
        _row("gtr", g, "nq", 40.0, 60.0, budget=b, **{f"em@{b}": em})
        for g, b, em in [("passage", 100, 30.0), ("proposition", 100, 35.0), ("passage", 500, 38.0)]
    ]
    _write_sweep(tmp_path, rows)
    for i in range(3):
        write_curve(tmp_path / str(i) / "answer_recall_by_words.csv", [0.0, 10.0 * (i + 1), 50.0])
    out = aggregate_sweep(tmp_path)
    assert out["table3"] == tmp_path / "table3.md"
    assert "35.0" in (tmp_path / "table3.md").read_text()
    assert (tmp_path / "answer_recall_by_words.png").stat().st_size > 1000
    # the budget sweep repeats the gtr/passage retrieval cell: averaged, not duplicated
    assert [r["granularity"] for r in out["table2"]] == ["passage", "proposition", "gain"]


def test_table2_keeps_corpus_and_index_conditions_apart():
    """A sweep over index=flat,hnsw must not average the two indexes into one cell."""
    rows = [
        _row("dpr", "passage", "nq", 20.0, 40.0, index="flat"),
        _row("dpr", "passage", "nq", 10.0, 30.0, index="hnsw"),
        _row("dpr", "proposition", "nq", 30.0, 50.0, index="flat"),
        _row("dpr", "proposition", "nq", 14.0, 34.0, index="hnsw"),
    ]
    table = table2_rows(rows)
    assert [(r["retriever"], r["index"], r["granularity"]) for r in table] == [
        ("dpr", "flat", "passage"),
        ("dpr", "flat", "proposition"),
        ("dpr", "flat", "gain"),
        ("dpr", "hnsw", "passage"),
        ("dpr", "hnsw", "proposition"),
        ("dpr", "hnsw", "gain"),
    ]
    assert "corpus" not in table[0]  # the corpus does not vary: no column for it
    assert table[0]["nq R@5"] == 20.0 and table[3]["nq R@5"] == 10.0
    assert table[2]["nq R@5"] == pytest.approx(10.0) and table[5]["nq R@5"] == pytest.approx(4.0)
    md = table2_markdown(table)
    assert "| Retriever | Index | Granularity | NQ R@5 |" in md
    assert "| DPR | hnsw | passage | 10.0 | 30.0 |" in md
    # the corpus too
    rows = [_row("dpr", "passage", "nq", 20.0, 40.0), {**_row("dpr", "passage", "nq", 9.0, 9.0)}]
    rows[1]["corpus"] = "wiki"
    table = table2_rows(rows)
    assert [(r["corpus"], r["nq R@5"]) for r in table] == [("c", 20.0), ("wiki", 9.0)]


def test_table2_rejects_duplicates_that_differ_in_unshown_settings(tmp_path):
    rows = [
        _row("dpr", "passage", "nq", 20.0, 40.0, budget=100, job_dir="sweep/0"),
        _row("dpr", "passage", "nq", 25.0, 45.0, budget=100, job_dir="sweep/1"),
    ]
    with pytest.raises(DataError, match=r"same Table 2 cell.*also in sweep/0"):
        table2_rows(rows)
    # a budget or reader repeat is the same retrieval: averaged
    rows[1]["reader"] = "tiny"
    (line,) = table2_rows(rows)
    assert line["nq R@5"] == pytest.approx(22.5)
    # the CSV carries a varying condition as a label column
    write_table2(
        [_row("dpr", "passage", "nq", 1.0, 2.0, index=i) for i in ("flat", "hnsw")], tmp_path
    )
    with open(tmp_path / "table2.csv") as f:
        got = list(csv.DictReader(f))
    assert list(got[0])[:3] == ["retriever", "index", "granularity"]
    assert [g["index"] for g in got] == ["flat", "hnsw"]


def test_shared_naming_covers_both_tables():
    from densex.report import naming, pivot, table2, table3

    # one pivot (cell keys, axes in paper order) behind both tables
    assert table2.pivot_axes is pivot.pivot_axes is table3.pivot_axes
    assert table2.cell_key is pivot.cell_key is table3.cell_key
    axes = pivot.pivot_axes([("c", "gtr", "proposition", "nq"), ("c", "dpr", "passage", "x")], 1)
    assert (axes.retrievers, axes.granularities) == (["dpr", "gtr"], ["passage", "proposition"])
    assert axes.datasets == ["nq", "x"] and axes.varying == [] and axes.conds == [("c",)]
    assert {"bm25", "minilm"} <= set(naming.RETRIEVER_ORDER)
    assert naming.display_name("tasb") == "TAS-B" and naming.display_name("demo") == "demo"
    assert naming.ordered(["x", "gtr", "y", "dpr", "x"], naming.RETRIEVER_ORDER) == [
        "dpr",
        "gtr",
        "x",
        "y",
    ]


def test_single_dataset_tables_show_no_average_column(tmp_path):
    """An `Avg` over one dataset repeats it: shown tables drop it, the CSV keeps it."""
    from densex.report.table2 import table2_markdown, write_table2

    rows = [
        {"retriever": "minilm", "granularity": g, "dataset": "demo", "recall@5": v, "recall@20": v}
        for g, v in (("passage", 90.0), ("proposition", 95.0))
    ]
    table = write_table2(rows, tmp_path)
    md = table2_markdown(table)
    assert "Avg" not in md and "R@5" in md
    assert "Avg R@5" in (tmp_path / "table2.csv").read_text().splitlines()[0]


class _RecordingRun:
    """Stands in for a wandb Run: keeps what was logged (the objects are real wandb types)."""

    def __init__(self) -> None:
        self.logged: dict = {}
        self.summary: dict = {}
        self.finished = False

    def log(self, data: dict) -> None:
        self.logged.update(data)

    def finish(self) -> None:
        self.finished = True


def test_wandb_gets_the_answer_recall_curve_figure_and_table3(tmp_path, monkeypatch):
    import wandb  # a core dependency

    from densex.qa.cell import write_curve
    from densex.report import aggregate, wandb_log

    run = _RecordingRun()
    wandb_log.log_cell(run, {"recall@5": 50.0}, [], [0.5], ([0, 1, 2], [0.0, 10.0, 20.0]))
    assert {"R@5", "recall_curve", "answer_recall_by_words"} <= set(run.logged)

    rows = [
        _row("gtr", g, "nq", 40.0, 60.0, budget=100, **{"em@100": em})
        for g, em in [("passage", 30.0), ("proposition", 35.0)]
    ]
    _write_sweep(tmp_path, rows)
    for i in range(2):
        write_curve(tmp_path / str(i) / "answer_recall_by_words.csv", [0.0, 10.0, 50.0])
    sweep_run = _RecordingRun()
    monkeypatch.setattr(aggregate, "init_run", lambda *a, **k: sweep_run)
    aggregate.aggregate_sweep(tmp_path, wandb_settings(OmegaConf.create({"logger": {"wandb": {}}})))
    assert isinstance(sweep_run.logged["answer_recall_by_words"], wandb.Image)
    table3 = sweep_run.logged["table3"]
    assert isinstance(table3, wandb.Table) and len(table3.data) == 2
    assert isinstance(sweep_run.logged["table2"], wandb.Table) and sweep_run.finished
