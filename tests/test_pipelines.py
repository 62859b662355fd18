"""evaluate.py / index.py end to end, as users and other tools call them (subprocesses, overrides).

A small real corpus: the first SQuAD-open article (33 passages + teacher propositions) and 40
of its questions, retrieved with the real MiniLM model. One single run checks the override
contract and DPR-format output; one multirun checks the sweep callback's Table 2.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import regex

from densex.corpus.columnar import PASSAGE_SCHEMA, write_shard
from densex.corpus.units import unit_tables
from densex.pipelines.evaluate.metrics import recall_at_each_k
from densex.qa.cell import read_curve
from densex.report.table2 import find_results
from densex.utils.io import DataError, read_json
from helpers.config import compose_config
from helpers.env import subprocess_env
from helpers.inproc import run_script

ENV = subprocess_env(HYDRA_FULL_ERROR="1")


def _evaluate(
    repo_root: Path, *overrides: str, timeout: int = 600, **env: str
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(repo_root / "evaluate.py"), *overrides]
    proc = subprocess.run(
        cmd, cwd=repo_root, env={**ENV, **env}, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


@pytest.fixture(scope="module")
def small(squad_open_article: dict[str, Path]) -> dict[str, Path]:
    """The session's one-article squad-open subset (conftest): P, Q, R files and its cache,
    shared with tests/test_analysis_e2e.py (whichever runs first encodes the units)."""
    return squad_open_article


def _contract(small: dict[str, Path], granularity: str) -> list[str]:
    return [
        "corpus=squad-open",
        f"corpus.passages={small['P']}",
        f"corpus.propositions={small['Q']}",
        "dataset=squad-open",
        f"dataset.path={small['R']}",
        "retriever=minilm",
        f"granularity={granularity}",
        f"paths.cache_dir={small['cache']}",
    ]


# --- pyserini's evaluate_dpr_retrieval ------------------------------------------------------
# `evaluate_retrieval` of pyserini/eval/evaluate_dpr_retrieval.py (castorini/pyserini, Apache-2.0,
# commit edcf887), transcribed step for step: it loads the file as a dict keyed by question id,
# walks `retrieval[qid]["contexts"]`, trusts `has_answer` where a context has it (older versions
# had no such branch) and otherwise matches the answers with DrQA's SimpleTokenizer in the text
# after the first newline ("title\ntext"). It returns the accuracies (percent) instead of
# printing them. The tokenizer below is the same regex, re-implemented.
_TOKEN = regex.compile(
    r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])",
    flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE,
)


def _tokens(text: str) -> list[str]:
    return [m.group().lower() for m in _TOKEN.finditer(text)]


def _has_answers(text: str, answers: list[str]) -> bool:
    import unicodedata

    words = _tokens(unicodedata.normalize("NFD", text))
    for answer in answers:
        a = _tokens(unicodedata.normalize("NFD", answer))
        if any(a == words[i : i + len(a)] for i in range(len(words) - len(a) + 1)):
            return True
    return False


def pyserini_evaluate_retrieval(retrieval_file: Path, topk: list[int]) -> dict[int, float]:
    with open(retrieval_file) as f:
        retrieval = json.load(f)
    accuracy: dict[int, list[int]] = {k: [] for k in topk}
    max_k = max(topk)
    for qid in list(retrieval.keys()):
        answers = retrieval[qid]["answers"]
        contexts = retrieval[qid]["contexts"]
        has_ans_idx = max_k  # first index in contexts that has answers
        for idx, ctx in enumerate(contexts):
            if idx >= max_k:
                break
            if "has_answer" in ctx:
                if ctx["has_answer"]:
                    has_ans_idx = idx
                    break
            else:
                text = ctx["text"].split("\n")[1]  # [0] is title, [1] is text
                if _has_answers(text, answers):
                    has_ans_idx = idx
                    break
        for k in topk:
            accuracy[k].append(0 if has_ans_idx >= k else 1)
    return {k: 100.0 * float(np.mean(accuracy[k])) for k in topk}


def _gunzip(path: Path, out: Path) -> Path:
    """What a pyserini user runs first (`gunzip -k`): its evaluator opens plain JSON only."""
    out.write_bytes(gzip.decompress(path.read_bytes()))
    return out


def _without_has_answer(path: Path, out: Path) -> Path:
    """The file as pyserini's converter writes it without flags: the evaluator must re-match."""
    data = json.loads(path.read_text())
    for item in data.values():
        for ctx in item["contexts"]:
            del ctx["has_answer"]
    out.write_text(json.dumps(data))
    return out


# ---------------------------------------------------------------------------------------------


# the 40-question, 33-passage subset, granularity=proposition (measured; see the test):
# recall@k and the README's answer recall within the first l words (`curve@l`)
PINNED_PROPOSITION_CELL = {
    "recall@1": 87.5,
    "recall@5": 97.5,
    "recall@20": 100.0,
    "recall@100": 100.0,
    "answer_recall@100": 87.5,
    "answer_recall@500": 97.5,
    "curve@50": 87.5,
    "curve@100": 87.5,
    "curve@200": 92.5,
    "curve@500": 97.5,
}


def test_evaluate_override_contract(repo_root, small, minilm_path, tmp_path):
    run_dir = tmp_path / "run"
    t0 = time.perf_counter()
    proc = _evaluate(
        repo_root,
        *_contract(small, "proposition"),
        f"hydra.run.dir={run_dir}",
        "logger=wandb",
        "log_samples=3",
        "retrieval_text=true",
        WANDB_MODE="offline",
        WANDB_SILENT="true",
    )
    wall = time.perf_counter() - t0
    (row,) = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert {
        k: row[k] for k in ("corpus", "retriever", "granularity", "dataset", "reader", "index")
    } == {
        "corpus": "squad-open",
        "retriever": "minilm",
        "granularity": "proposition",
        "dataset": "squad-open",
        "reader": "none",
        "index": "flat",
    }
    assert row["budget"] == 100 and row["n_questions"] == 40 and row["n_passages"] == 33
    n_props = sum(
        len(json.loads(line)["propositions"]) for line in small["Q"].read_text().splitlines()
    )
    assert row["n_units"] == n_props
    # deterministic (MiniLM fp32, exact search): the subset's figures, to one question of 40,
    # recall@k and the README's answer recall within the first l words
    # (the short-answer figures, `answer_recall@l_short5` of dataset.short_answer_words, are
    # not pinned here)
    got = {
        k: row[k] for k in row if k.startswith(("recall@", "answer_recall@")) and "_short" not in k
    }
    words, curve = read_curve(run_dir / "answer_recall_by_words.csv")
    got |= {f"curve@{n}": curve[words.index(n)] for n in (50, 100, 200, 500)}
    assert got == pytest.approx(PINNED_PROPOSITION_CELL, abs=2.5), got
    assert row["time_total_s"] > 0 and row["time_total_s"] < wall

    retrieval = read_json(run_dir / "retrieval.json.gz")  # with text: always gzip
    assert len(retrieval) == 40
    questions = [json.loads(line) for line in small["R"].read_text().splitlines()]
    passage_ids = {json.loads(line)["id"] for line in small["P"].read_text().splitlines()}
    for item, q in zip(retrieval, questions):
        assert item["question"] == q["question"] and item["answers"] == q["answers"]
        ids = [c["id"] for c in item["ctxs"]]
        assert len(ids) == 33 and set(ids) == passage_ids  # k=100 > 33: every passage, once
        scores = [c["score"] for c in item["ctxs"]]
        assert scores == sorted(scores, reverse=True)
        assert set(item["ctxs"][0]) == {"id", "title", "text", "score", "has_answer"}
    # pyserini's evaluator, run on our retrieval.pyserini.json, gives our recall@k: trusting
    # our has_answer flags, and re-matching the answers in the text itself
    topk = [1, 5, 20, 100]
    ours = {k: row[f"recall@{k}"] for k in topk}
    pyserini_file = _gunzip(run_dir / "retrieval.pyserini.json.gz", tmp_path / "pys.json")
    assert pyserini_evaluate_retrieval(pyserini_file, topk) == pytest.approx(ours)
    bare = _without_has_answer(pyserini_file, tmp_path / "bare.json")
    assert pyserini_evaluate_retrieval(bare, topk) == pytest.approx(ours)
    pys = json.loads(pyserini_file.read_text())
    assert list(pys) == [q["id"] for q in questions]
    first = pys[questions[0]["id"]]
    assert first["question"] == questions[0]["question"] and len(first["contexts"]) == 33
    assert set(first["contexts"][0]) == {"docid", "score", "text", "has_answer"}
    assert [c["docid"] for c in first["contexts"]] == [c["id"] for c in retrieval[0]["ctxs"]]
    title, text = first["contexts"][0]["text"].split("\n")
    assert (title, text) == (retrieval[0]["ctxs"][0]["title"], retrieval[0]["ctxs"][0]["text"])
    curve = list(csv.DictReader((run_dir / "recall_at_k.csv").read_text().splitlines()))
    assert float(curve[4]["recall"]) == pytest.approx(row["recall@5"])
    assert (run_dir / "answer_recall_by_words.csv").exists()
    assert (run_dir / "answer_recall_by_words.png").exists()  # a single run plots its curve
    assert "recall@20" in proc.stdout  # the metrics table, logged...
    assert "recall@20" in (run_dir / "evaluate.log").read_text()  # ...so also in the log file
    assert "\x1b[" not in proc.stdout + proc.stderr  # no escapes when not on a terminal
    # logger=wandb: an offline run (no account needed) beside the results
    (wandb_run,) = (run_dir / "wandb").glob("offline-run-*")
    assert list(wandb_run.glob("*.wandb"))


def test_multirun_writes_table2(repo_root, small, minilm_path, tmp_path, capfd):
    """`evaluate.py -m` run in this process (Hydra's multirun, its sweep callback); the
    subprocess of the entry script is `test_evaluate_override_contract`'s."""
    sweep = tmp_path / "sweep"
    status = run_script(
        "evaluate.py",
        "-m",
        *_contract(small, "passage,sentence"),
        "topk=[5,20]",
        "retrieval_gzip=false",
        "trainer.enable_progress_bar=false",
        f"hydra.sweep.dir={sweep}",
    )
    out, err = capfd.readouterr()
    assert status == 0, f"{out[-3000:]}\n{err[-5000:]}"
    cells = [p.parent for p in find_results(sweep)]  # `0_granularity=passage,...`: job order
    assert cells[0].name.startswith("0_") and "granularity=passage" in cells[0].name
    rows = [json.loads((cells[i] / "results.jsonl").read_text()) for i in range(2)]
    assert [r["granularity"] for r in rows] == ["passage", "sentence"]
    assert rows[1]["n_units"] > rows[0]["n_units"] == 33
    md = (sweep / "table2.md").read_text()
    table = {
        r["granularity"]: r for r in csv.DictReader((sweep / "table2.csv").read_text().splitlines())
    }
    assert set(table) == {"passage", "sentence"}  # no proposition row: no gain row either
    for r in rows:
        line = table[r["granularity"]]
        assert float(line["SQuAD-open R@5"]) == pytest.approx(r["recall@5"], abs=1e-3)
        assert float(line["Avg R@20"]) == pytest.approx(r["recall@20"], abs=1e-3)
        assert f"| {r['recall@20']:.1f} |" in md
    # without passage text, pyserini's evaluator still reads the has_answer flags
    retrieval = json.loads((cells[1] / "retrieval.json").read_text())
    assert set(retrieval[0]["ctxs"][0]) == {"id", "score", "has_answer"}
    pyserini_file = cells[1] / "retrieval.pyserini.json"
    (first,) = list(json.loads(pyserini_file.read_text()).values())[:1]
    assert set(first["contexts"][0]) == {"docid", "score", "has_answer"}
    acc = pyserini_evaluate_retrieval(pyserini_file, [5, 20])
    assert acc == pytest.approx({5: rows[1]["recall@5"], 20: rows[1]["recall@20"]})
    assert "Table 2" in out
    assert (sweep / "answer_recall_by_words.png").exists()


def test_index_units_stage_prints_table1(repo_root, small, tmp_path, capsys):
    from densex.pipelines.index.run import run

    overrides = [
        "corpus=squad-open",
        f"corpus.passages={small['P']}",
        f"corpus.propositions={small['Q']}",
        "stage=units",
        f"paths.cache_dir={tmp_path}",
    ]
    run(compose_config("index", *overrides))
    (units_dir,) = {p.parent for p in tmp_path.glob("units/squad-open/*/passage.jsonl")}
    counts = {
        g: len((units_dir / f"{g}.jsonl").read_text().splitlines())
        for g in ("passage", "sentence", "proposition")
    }
    assert counts["passage"] == 33 and counts["sentence"] > 33
    assert counts["proposition"] == sum(
        len(json.loads(line)["propositions"]) for line in small["Q"].read_text().splitlines()
    )
    out = capsys.readouterr().out
    assert "# units" in out and "Propositions" in out and f"{counts['proposition']:,}" in out
    assert not list(tmp_path.glob("embeddings/**/manifest.json"))  # stage=units stops there


def test_unit_tables_reject_unknown_passage(tmp_path):
    write_shard(
        tmp_path / "arrow" / "passages" / "00000.arrow",
        {"id": ["a"], "title": [""], "section": [""], "text": ["x"], "words": [1]},
        PASSAGE_SCHEMA,
    )
    (tmp_path / "u.jsonl").write_text(
        '{"id": "a", "passage_id": "a", "text": "x"}\n{"id": "b::s0", "passage_id": "b", "text": "y"}\n'
    )
    with pytest.raises(DataError, match=r"u.jsonl:2: field 'passage_id'"):
        unit_tables(tmp_path / "u.jsonl")
    (tmp_path / "u.jsonl").write_text(
        '{"id": "a::s1", "passage_id": "a", "text": "x"}\n{"id": "a::s0", "passage_id": "a", "text": "y"}\n'
    )
    passages, units = unit_tables(tmp_path / "u.jsonl")
    assert units.numpy("passage_row").tolist() == [0, 0] and len(passages) == 1
    assert units.slice("id", 0, 2) == ["a::s1", "a::s0"]


def test_recall_at_each_k_is_cumulative():
    hits = np.array([[0, 1, 0], [0, 0, 0], [1, 1, 0], [0, 0, 1]], dtype=bool)
    assert recall_at_each_k(hits).tolist() == [0.25, 0.5, 0.75]


@pytest.mark.parametrize("experiment", ["demo", "squad-open", "table2", "table3"])
def test_experiment_configs_compose(repo_root, experiment):
    cfg = compose_config("evaluate", f"experiment={experiment}", hydra=True)
    params = cfg.hydra.sweeper.params
    assert params.granularity == "passage,sentence,proposition"
    assert cfg.hydra.callbacks.aggregate._target_ == "densex.pipelines.callbacks.AggregateResults"
    if experiment == "demo":
        assert cfg.corpus.name == "demo" and cfg.retriever.name == "minilm"
        # Table 2 shows every cut-off of topk, R@1 first (aggregate ks null)
        assert cfg.hydra.callbacks.aggregate.ks is None and list(cfg.topk) == [1, 5, 20]
    elif experiment == "squad-open":
        assert cfg.corpus.name == cfg.dataset.name == "squad-open"
        assert cfg.retriever.name == "minilm" and not cfg.retrieval_text
    else:
        assert params.retriever == "simcse,contriever,dpr,ance,tasb,gtr"
        assert params.dataset == "nq,tqa,webq,squad,eq"
    if experiment == "table3":
        assert params.budget == "100,500" and cfg.reader.name == "unifiedqa"


@pytest.mark.slow
def test_squad_open_benchmark_minilm(repo_root, squad_open, minilm_path, tmp_path):
    """The real benchmark: all 7,431 questions, three granularities (several minutes on CPU)."""
    sweep = tmp_path / "sweep"
    cache = os.environ.get("DENSEX_CACHE_DIR", str(tmp_path / "cache"))
    _evaluate(
        repo_root,
        "-m",
        "corpus=squad-open",
        "dataset=squad-open",
        "retriever=minilm",
        "granularity=passage,sentence,proposition",
        f"paths.cache_dir={cache}",
        f"hydra.sweep.dir={sweep}",
        timeout=3600,
    )
    rows = {r["granularity"]: r for r in (json.loads(p.read_text()) for p in find_results(sweep))}
    for g, r in rows.items():
        print(
            g,
            {k: r[k] for k in ("recall@5", "recall@20", "n_units", "n_questions", "time_total_s")},
        )
        assert r["n_questions"] == 7431 and r["n_passages"] == 2203
    # the README's table (MiniLM, every question): a change of the data path moves no figure
    table = {
        g: [round(rows[g][f"recall@{k}"], 1) for k in (1, 5, 20, 100)]
        for g in ("passage", "sentence", "proposition")
    }
    assert table == {
        "passage": [66.8, 88.8, 96.2, 99.3],
        "sentence": [74.2, 92.1, 97.5, 99.6],
        "proposition": [80.1, 95.2, 98.6, 99.8],
    }
    assert rows["passage"]["n_units"] == 2203 and rows["proposition"]["n_units"] == 17657
    assert rows["sentence"]["n_units"] > rows["passage"]["n_units"]
    assert (sweep / "table2.md").exists()


@pytest.mark.parametrize(
    "cell, generates",
    [
        (["granularity=proposition"], True),
        (["granularity=sentence"], False),
        (["granularity=mixed", "granularity.members=[sentence,proposition]"], True),
        (["granularity=mixed", "granularity.members=[passage,sentence]"], False),
        (["fusion=rrf", "fusion.members=[{granularity:sentence},{granularity:proposition}]"], True),
        (["fusion=hybrid", "granularity=proposition"], True),
        (["fusion=hybrid", "granularity=sentence"], False),
    ],
)
def test_a_fused_cell_over_propositions_generates_them(cell, generates):
    """With `propositionizer=model`, a cell generates propositions whenever it searches them:
    its own granularity, a member of `granularity=mixed` or of a fusion (the fused cells of
    the student's propositions and sentences)."""
    from densex.pipelines.index.units import generates_propositions

    cfg = compose_config("evaluate", "propositionizer=model", "propositionizer.model=x", *cell)
    assert generates_propositions(cfg) is generates


def test_index_generates_propositions_with_a_model(repo_root, small, tiny_t5, tmp_path):
    """propositionizer=model (a tiny random T5): generated, cached, and used for the units."""
    from densex.pipelines.index.run import run

    passages = tmp_path / "p.jsonl"
    passages.write_text("".join(small["P"].read_text().splitlines(keepends=True)[:3]))
    overrides = [
        "corpus=squad-open",
        f"corpus.passages={passages}",
        "corpus.propositions=null",
        "stage=propositions",
        "propositionizer=model",
        f"propositionizer.model={tiny_t5}",
        "propositionizer.max_new_tokens=8",
        "trainer=cpu",
        "trainer.enable_progress_bar=false",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"paths.output_dir={tmp_path / 'run'}",
    ]
    cfg = compose_config("index", *overrides)
    run(cfg)
    (props,) = (tmp_path / "cache" / "propositions").rglob("propositions.jsonl")
    rows = [json.loads(line) for line in props.read_text().splitlines()]
    assert [r["id"] for r in rows] == [
        json.loads(line)["id"] for line in passages.read_text().splitlines()
    ]
    units = list((tmp_path / "cache" / "units").rglob("proposition.jsonl"))
    assert len(units) == 1  # only the generated set has proposition units
    n_units = len(units[0].read_text().splitlines())
    assert n_units == sum(len(r["propositions"]) for r in rows) > 0
    mtime = props.stat().st_mtime_ns
    run(cfg)  # cached: not generated again
    assert props.stat().st_mtime_ns == mtime


def _compose_evaluate(repo_root: Path, overrides: list[str]):
    return compose_config("evaluate", *overrides)


def test_answer_recall_does_not_depend_on_topk(repo_root, small, minilm_path, tmp_path):
    """Passage units and topk=[1]: the curve to 500 words still reads ~5 passages of words."""
    from densex.pipelines.evaluate.run import run

    rows = {}
    for name, topk in (("k1", "[1]"), ("k100", "[1,5,20,100]")):
        cfg = _compose_evaluate(
            repo_root,
            [
                *_contract(small, "passage"),
                f"topk={topk}",
                "trainer=cpu",
                "trainer.enable_progress_bar=false",
                f"paths.output_dir={tmp_path / name}",
            ],
        )
        run(cfg)
        rows[name] = json.loads((tmp_path / name / "results.jsonl").read_text())
    assert rows["k1"]["recall@1"] == rows["k100"]["recall@1"]
    for key in ("answer_recall@100", "answer_recall@500"):
        assert rows["k1"][key] == rows["k100"][key], key
    curves = [
        (tmp_path / name / "answer_recall_by_words.csv").read_text() for name in ("k1", "k100")
    ]
    assert curves[0] == curves[1]


class _FakeSearcher:
    """Exact top-n over fixed per-query unit scores (score desc, row asc), counting searches."""

    def __init__(self, scores: dict[str, np.ndarray]):
        self.scores = scores
        self.ntotal = len(next(iter(scores.values())))
        self.calls: list[tuple[int, int]] = []

    def search(self, queries, n):
        self.calls.append((len(queries), n))
        out_s = np.full((len(queries), n), -np.inf, np.float32)
        out_r = np.full((len(queries), n), -1, np.int64)
        for i, q in enumerate(queries):
            s = self.scores[q]
            order = np.lexsort((np.arange(len(s)), -s))[:n]
            out_s[i, : len(order)], out_r[i, : len(order)] = s[order], order
        return out_s, out_r


def test_fetch_units_for_words_extends_only_short_results():
    from densex.retrieval.search import fetch_units_for_words, retrieve_passages

    rng = np.random.default_rng(0)
    n_units = 40
    searcher = _FakeSearcher({q: rng.random(n_units).astype(np.float32) for q in ("a", "b")})
    unit_words = np.full(n_units, 10, np.int64)
    unit_words[int(np.argmax(searcher.scores["b"]))] = 1000  # b's best unit is long enough
    rows = np.arange(n_units)  # one unit per passage
    results = retrieve_passages(searcher, ["a", "b"], rows, k=1)
    before = [r.passage_rows.tolist() for r in results]
    assert all(len(r.unit_rows) == 2 for r in results)  # k + 1: 20 words for "a"
    searcher.calls.clear()
    assert fetch_units_for_words(searcher, ["a", "b"], results, unit_words, 95) == 1
    assert searcher.calls and all(nq == 1 for nq, _ in searcher.calls)  # only "a" again
    a, b = results
    assert int(unit_words[a.unit_rows].sum()) >= 95 and len(b.unit_rows) == 2
    full = np.lexsort((np.arange(n_units), -searcher.scores["a"]))
    assert a.unit_rows.tolist() == full[: len(a.unit_rows)].tolist()  # the same ranking
    assert [r.passage_rows.tolist() for r in results] == before
    # more words than the index holds: everything, then stop
    assert fetch_units_for_words(searcher, ["a", "b"], results, unit_words, 10**6) == 2
    assert len(a.unit_rows) == len(b.unit_rows) == n_units


def test_evaluate_non_zero_rank_writes_nothing(repo_root, small, monkeypatch, tmp_path):
    """trainer.strategy=ddp re-runs the script per rank: rank 1 encodes, then returns."""
    import densex.pipelines.evaluate.fusion as fusion
    from densex.pipelines.evaluate.run import run

    calls = []

    def fake_searcher(units_path, *args, **kwargs):
        calls.append(units_path)
        raise_if_used = type("S", (), {"unit_ids": property(lambda s: 1 / 0)})
        return raise_if_used()

    monkeypatch.setattr(fusion, "load_or_build_searcher", fake_searcher)
    monkeypatch.setenv("RANK", "1")
    cfg = _compose_evaluate(
        repo_root, [*_contract(small, "passage"), f"paths.output_dir={tmp_path / 'run'}"]
    )
    assert np.isnan(run(cfg))
    assert len(calls) == 1  # every rank takes part in encoding
    assert not list((tmp_path / "run").glob("*"))  # no results, retrieval files, W&B


def _index_cfg(repo_root: Path, overrides: list[str]):
    return compose_config("index", *overrides)


def test_generated_propositions_follow_the_model_files(repo_root, small, tiny_t5, tmp_path):
    """A retrained model exported to the same dir must not reuse the old propositions."""
    import shutil

    from densex.pipelines.index.units import generated_propositions
    from densex.utils.tiny_t5 import build_tiny_t5

    model = tmp_path / "export"
    shutil.copytree(tiny_t5, model)
    passages = tmp_path / "p.jsonl"
    passages.write_text("".join(small["P"].read_text().splitlines(keepends=True)[:2]))
    cfg = _index_cfg(
        repo_root,
        [
            "propositionizer=model",
            f"propositionizer.model={model}",
            "propositionizer.max_new_tokens=4",
            "trainer=cpu",
            "trainer.enable_progress_bar=false",
            f"paths.cache_dir={tmp_path / 'cache'}",
            f"paths.output_dir={tmp_path / 'run'}",
        ],
    )
    first = generated_propositions(cfg, passages)
    assert generated_propositions(cfg, passages) == first  # unchanged model: cached
    build_tiny_t5(model, seed=1)  # "retrained": new weights, same directory
    second = generated_propositions(cfg, passages)
    assert second != first and second.exists()
    manifest = json.loads((second.parent / "manifest.json").read_text())
    assert manifest["shards"]["generated"] == manifest["shards"]["total"] == 1


def test_propositions_key_follows_the_prompt_file(repo_root, small, tmp_path):
    from densex.pipelines.index.units import propositions_key

    prompt = tmp_path / "prompt.txt"
    prompt.write_text((repo_root / "conf" / "prompts" / "figure8.txt").read_text())
    cfg = _index_cfg(
        repo_root,
        [
            "propositionizer=teacher",
            f"propositionizer.prompt={prompt}",
            f"paths.cache_dir={tmp_path / 'cache'}",
        ],
    )
    before = propositions_key(cfg, small["P"])
    assert propositions_key(cfg, small["P"]) == before
    prompt.write_text(prompt.read_text() + "\nBe brief.\n")
    assert propositions_key(cfg, small["P"]) != before


def test_propositions_key_follows_per_sentence(repo_root, small, tiny_t5, tmp_path):
    """Per-sentence propositions are other propositions (another cache entry); the default
    keeps the key it had before the setting existed (old caches stay valid)."""
    from omegaconf import OmegaConf

    from densex.pipelines.index.units import propositions_key

    base = ["propositionizer=model", f"propositionizer.model={tiny_t5}", "trainer=cpu"]
    default = propositions_key(_index_cfg(repo_root, base), small["P"])
    explicit = _index_cfg(repo_root, [*base, "propositionizer.per_sentence=false"])
    per_sentence = _index_cfg(repo_root, [*base, "propositionizer.per_sentence=true"])
    assert propositions_key(explicit, small["P"]) == default
    assert propositions_key(per_sentence, small["P"]) != default
    cfg = OmegaConf.create(OmegaConf.to_container(_index_cfg(repo_root, base)))
    del cfg.propositionizer["per_sentence"]  # a config from before the setting
    assert propositions_key(cfg, small["P"]) == default
