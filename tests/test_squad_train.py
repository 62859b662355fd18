"""squad-train as densex benchmarks: the title filter, the short-answer metrics, preflight, and
densex's recall against an independent computation on a few real articles.

Two squad-train articles with teacher propositions (31 passages, 105 questions; one title
percent-encoded in SQuAD's JSON: `Bill_%26_Melinda_Gates_Foundation`) go through
`experiment=squad-train-props` at passage, sentence and proposition granularity, in process.
The same retrieval is then computed outside densex: sentence-transformers encodes the same
texts with the packaged MiniLM, numpy searches exhaustively, a passage scores its best unit,
and pyserini's `has_answers` (or its transcription, `helpers.dpr_answers`) judges the passage
text; densex's R@k must equal it within 0.1 point at k = 1, 5, 20.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from densex.corpus.spec import CorpusSpec, TitleFilterSpec
from densex.corpus.titles import TitleFilter, filter_rows
from densex.corpus.units_key import units_key
from densex.data.questions import load_dataset_questions
from densex.data.spec import DatasetSpec
from densex.data.squad_articles import (
    article_question_ids,
    article_questions,
    article_titles,
    passage_title,
)
from densex.pipelines.edge import dataset_spec
from densex.pipelines.evaluate.cell import granularity_name
from densex.pipelines.preflight.grid import grid_overrides
from densex.pipelines.preflight.hub import PreflightError
from densex.pipelines.preflight.run import preflight
from densex.utils.io import DataError, read_json, read_jsonl
from helpers.config import compose_config
from helpers.dpr_answers import SimpleTokenizer, has_answers

ARTICLES = ("Matter", "Bill & Melinda Gates Foundation")
INCLUDE = "corpus.titles.include=[Matter,'Bill & Melinda Gates Foundation']"
GRANULARITIES = ("passage", "sentence", "proposition")
KS = (1, 5, 20)


def _cell(cache: Path, out: Path, granularity: str, *extra: str):
    return compose_config(
        "evaluate", "experiment=squad-train-props", INCLUDE, f"granularity={granularity}",
        "trainer=cpu", "trainer.enable_progress_bar=false", "topk=[1,5,20]",
        "dataset.qrels.path=null", f"paths.cache_dir={cache}", f"paths.output_dir={out}", *extra,
    )  # fmt: skip


@pytest.fixture(scope="module")
def cells(squad_train: Path, minilm_path: str, tmp_path_factory) -> dict[str, Path]:
    """The three cells' run dirs (densex, in process, one cache)."""
    from densex.pipelines.evaluate.run import run

    root = tmp_path_factory.mktemp("squad_train")
    out = {}
    for g in GRANULARITIES:
        out[g] = root / g
        run(_cell(root / "cache", out[g], g))
    return out


def _row(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.jsonl").read_text())


def _units_dir(cells: dict[str, Path]) -> Path:
    """The units directory the cells searched (the proposition cell's holds all three)."""
    (manifest,) = (cells["passage"].parent / "cache" / "units").rglob("manifest.json")
    return manifest.parent


# --- the independent computation --------------------------------------------------------------


def _independent_units(data: Path, passages: list[dict]) -> dict[str, tuple[list[str], list[int]]]:
    """Per granularity, (texts as MiniLM reads them: title, space, text; passage of each),
    made from the shared files with spaCy's rule-based sentencizer, not densex's units."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    row_of = {p["id"]: i for i, p in enumerate(passages)}
    sentences = [
        (i, s.text.strip())
        for i, doc in enumerate(nlp.pipe(p["text"] for p in passages))
        for s in doc.sents
        if s.text.strip()
    ]
    props = [
        (row_of[r["id"]], t)
        for r in read_jsonl(data / "propositions.jsonl")
        if r["id"] in row_of
        for t in r["propositions"]
        if t.strip()
    ]
    units = {
        "passage": list(enumerate(p["text"] for p in passages)),
        "sentence": sentences,
        "proposition": [(i, t.strip()) for i, t in props],
    }
    return {
        g: ([f"{passages[i]['title']} {t}" for i, t in us], [i for i, _ in us])
        for g, us in units.items()
    }


def _independent_retrieval(data: Path, minilm_path: str) -> dict[str, tuple]:
    """Per granularity: R@k (%) by sentence-transformers + numpy + pyserini's `has_answers`,
    and each question's top-20 passage ids and scores."""
    from sentence_transformers import SentenceTransformer

    passages = [p for p in read_jsonl(data / "passages.jsonl") if p["title"] in ARTICLES]
    questions = article_questions(
        data / "squad-train-v1.1.json", data / "questions.jsonl", ARTICLES
    )
    model = SentenceTransformer(minilm_path, device="cpu")
    q = model.encode([x["question"] for x in questions], normalize_embeddings=True)
    tok = SimpleTokenizer()
    # a (question, passage) pair judged once, whichever granularity ranks the passage
    judged = functools.cache(
        lambda qi, pi: has_answers(passages[pi]["text"], questions[qi]["answers"], tok)
    )
    out = {}
    for g, (texts, owner) in _independent_units(data, passages).items():
        u = model.encode(texts, normalize_embeddings=True, batch_size=64)
        scores = q @ u.T  # exhaustive inner product
        best = np.full((len(q), len(passages)), -np.inf, dtype=np.float32)
        np.maximum.at(best.T, np.asarray(owner), scores.T)  # a passage: its best unit
        ranked = np.argsort(-best, axis=1, kind="stable")[:, : max(KS)]
        hit = np.array([[judged(qi, int(pi)) for pi in ranks] for qi, ranks in enumerate(ranked)])
        first = np.logical_or.accumulate(hit, axis=1)
        recall = {k: 100.0 * float(first[:, k - 1].mean()) for k in KS}
        ids = [[passages[p]["id"] for p in ranks] for ranks in ranked]
        out[g] = (recall, ids, np.take_along_axis(best, ranked, 1))
    return out


def test_recall_equals_an_independent_computation(cells, squad_train, minilm_path):
    """R@1/5/20 within 0.1 point (105 questions: equal), and the rankings themselves: each
    question's top 20 passages in the same order, but where two scores tie within 1e-5."""
    rows = {g: _row(d) for g, d in cells.items()}
    assert {r["n_questions"] for r in rows.values()} == {105}
    assert {r["n_passages"] for r in rows.values()} == {31}
    expected = _independent_retrieval(squad_train, minilm_path)
    for g in GRANULARITIES:
        recall, ids, scores = expected[g]
        got = {k: rows[g][f"recall@{k}"] for k in KS}
        assert got == pytest.approx(recall, abs=0.1), (g, got, recall)
        retrieval = read_json(cells[g] / "retrieval.json.gz")
        for q, item in enumerate(retrieval):
            ours = [c["id"] for c in item["ctxs"]]
            assert np.allclose([c["score"] for c in item["ctxs"]], scores[q], atol=1e-5), (g, q)
            gaps = np.abs(np.diff(scores[q])) <= 1e-5
            near = np.r_[gaps, False] | np.r_[False, gaps]
            assert all(a == b or n for a, b, n in zip(ours, ids[q], near)), (g, q)


def test_units_are_the_shared_files_own(cells, squad_train):
    """densex's unit texts are those the independent computation makes (the filter kept the
    two articles' passages and propositions), and the teacher rows of the other 154
    propositionized articles are left out and counted, not an error."""
    units = _units_dir(cells)
    passages = [p for p in read_jsonl(squad_train / "passages.jsonl") if p["title"] in ARTICLES]
    independent = _independent_units(squad_train, passages)
    titles = {p["id"]: p["title"] for p in passages}
    for g in GRANULARITIES:
        ours = [f"{titles[u['passage_id']]} {u['text']}" for u in read_jsonl(units / f"{g}.jsonl")]
        assert ours == independent[g][0], g
    manifest = json.loads((units / "manifest.json").read_text())
    assert manifest["outside_title_filter"] == {"proposition": 7417 - 31}
    assert (
        manifest["inputs"]["titles"]["include"] and manifest["inputs"]["titles"]["exclude"] is None
    )


# --- the title filter ----------------------------------------------------------------------------


def _corpus(data: Path, **titles) -> CorpusSpec:
    return CorpusSpec(
        name="squad-train",
        passages=str(data / "passages.jsonl"),
        titles=TitleFilterSpec(**titles),
    )


def test_title_filter_keys_every_cache_entry_by_its_titles(squad_train, tmp_path):
    """The filter's titles (not the file holding them) key the units, so filtered and
    unfiltered corpora never share an entry; embeddings and indexes are keyed by the units'
    content below them. An unfiltered corpus keeps the key it had before filters existed."""
    listed = tmp_path / "titles.txt"
    listed.write_text("Grape\n\nMatter\n")
    as_json = tmp_path / "titles.json"
    as_json.write_text(json.dumps(["Matter", "Grape"]))
    keys = {
        "all": units_key(_corpus(squad_train)),
        "list": units_key(_corpus(squad_train, include=["Matter", "Grape"])),
        "txt": units_key(_corpus(squad_train, include=str(listed))),
        "json": units_key(_corpus(squad_train, include=str(as_json))),
        "other": units_key(_corpus(squad_train, include=["Matter"])),
        "exclude": units_key(_corpus(squad_train, exclude=["Matter", "Grape"])),
    }
    assert keys["list"] == keys["txt"] == keys["json"]
    assert len({keys[k] for k in ("all", "list", "other", "exclude")}) == 4
    no_filter = CorpusSpec(name="squad-train", passages=str(squad_train / "passages.jsonl"))
    assert units_key(no_filter) == keys["all"]


def test_title_filter_keeps_passages_and_questions_of_its_articles(squad_train):
    passages = list(read_jsonl(squad_train / "passages.jsonl"))
    flt = TitleFilter.from_spec(TitleFilterSpec(exclude=["Matter"]), "corpus.titles")
    kept = list(filter_rows(iter(passages), flt, "passages.jsonl"))
    assert len(kept) == len(passages) - 7 and all(p["title"] != "Matter" for p in kept)  # 7 of its
    # questions follow the corpus's filter (dataset=squad-train interpolates corpus.titles),
    # before `limit` counts
    cfg = compose_config("evaluate", "experiment=squad-train", INCLUDE)
    spec = dataset_spec(cfg.dataset)
    assert spec.titles.include == list(ARTICLES)
    json_path = squad_train / "squad-train-v1.1.json"
    expected = article_questions(json_path, squad_train / "questions.jsonl", ARTICLES)
    assert len(expected) == 105  # all of them: the cells' n_questions
    first = load_dataset_questions(spec, limit=10)  # the limit counts the kept questions only
    assert [q["id"] for q in first] == [q["id"] for q in expected[:10]]
    excluded = load_dataset_questions(
        DatasetSpec(
            name="d",
            path=str(squad_train / "questions.jsonl"),
            articles=str(json_path),
            titles=TitleFilterSpec(exclude=list(ARTICLES)),
        )  # fmt: skip
    )
    assert len(excluded) == 87_599 - 105


def test_a_title_no_article_has_is_an_error_naming_the_key(squad_train):
    passages = list(read_jsonl(squad_train / "passages.jsonl"))
    # SQuAD's JSON spelling, not the passages': refused, not an empty corpus
    flt = TitleFilter.from_spec(TitleFilterSpec(include=["Matter", "Bill_%26_Melinda_Gates_Foundation"]),
                                "corpus.titles")  # fmt: skip
    with pytest.raises(DataError, match=r"corpus\.titles\.include.*1 of 2 titles match no"):
        list(filter_rows(iter(passages), flt, "passages.jsonl"))
    spec = DatasetSpec(name="d", path=str(squad_train / "questions.jsonl"),
                       articles=str(squad_train / "squad-train-v1.1.json"),
                       titles=TitleFilterSpec(include=["Brasilia"]))  # fmt: skip
    with pytest.raises(DataError, match=r"dataset\.titles\.include"):
        load_dataset_questions(spec)


def test_percent_encoded_titles_are_decoded_as_the_passages_spell_them(squad_train):
    """SQuAD train's JSON writes `Bras%C3%ADlia` and `Bill_%26_Melinda_Gates_Foundation`; the
    passages and the filter spell the decoded title, and its questions are found by it."""
    data = json.loads((squad_train / "squad-train-v1.1.json").read_text())["data"]
    raw = {a["title"] for a in data}
    assert {"Bras%C3%ADlia", "Bill_%26_Melinda_Gates_Foundation"} <= raw
    assert passage_title("Bras%C3%ADlia") == "Brasília"
    titles = article_titles(squad_train / "squad-train-v1.1.json")
    passage_titles = {p["title"] for p in read_jsonl(squad_train / "passages.jsonl")}
    assert set(titles) == passage_titles and len(titles) == 442
    propositionized = json.loads((squad_train / "propositionized_titles.json").read_text())
    assert set(propositionized) <= passage_titles and len(propositionized) == 156
    encoded = {"Bras%C3%ADlia", "Bill_%26_Melinda_Gates_Foundation"}
    qids = {
        q["id"] for a in data if a["title"] in encoded for p in a["paragraphs"] for q in p["qas"]
    }
    got = article_questions(squad_train / "squad-train-v1.1.json", squad_train / "questions.jsonl",
                            ["Brasília", "Bill & Melinda Gates Foundation"])  # fmt: skip
    assert {q["id"] for q in got} == qids and len(qids) > 100
    # the loader's filter: the same ids, from the JSON alone
    two = ["Brasília", "Bill & Melinda Gates Foundation"]
    assert article_question_ids(squad_train / "squad-train-v1.1.json", two) == qids


# --- the short-answer metrics --------------------------------------------------------------------


def test_short_answer_metrics_are_the_metric_on_the_short_answer_questions(tmp_path):
    """AR@l on all questions and on those whose shortest answer has <= N words: the same code
    on the masked questions, keyed `_short<N>`, labelled `(≤N-word answers)`."""
    from densex.analysis.per_question import question_score
    from densex.qa.cell import qa_metrics
    from densex.report.naming import answer_recall_metrics, metric_label

    questions = [
        {"id": "a", "question": "?", "answers": ["Paris"]},  # short, found in the first unit
        {"id": "b", "question": "?", "answers": ["a copper statue of Christ with arms"]},  # long
        {"id": "c", "question": "?", "answers": ["Berlin", "the city of Berlin in Germany"]},
        {"id": "d", "question": "?", "answers": ["Rome"]},  # short, never found
    ]
    units = [
        ["Paris is the capital."],
        ["There is a copper statue of Christ with arms upraised."],
        ["filler " * 150, "It lies in the city of Berlin in Germany."],
        ["Nothing here."],
    ]
    per_q: dict[str, list] = {}
    m = qa_metrics(questions, units, None, 100, 500, tmp_path, per_question=per_q,
                   short_answer_words=5)  # fmt: skip
    assert m["answer_recall@100"] == 50.0  # a, b found within 100 words; c after 150
    assert m["answer_recall@100_short5"] == pytest.approx(100 / 3, abs=1e-4)  # a of {a, c, d}
    assert m["n_short_answer_questions"] == 3 and m["short_answer_words"] == 5
    assert m["answer_recall@500"] == 75.0
    assert m["answer_recall@500_short5"] == pytest.approx(200 / 3, abs=1e-4)
    assert "answer_recall@100_short5" not in qa_metrics(questions, units, None, 100, 500, tmp_path)
    # the paired tests score the same subset per question; the tables label it
    rows = [{"answers": q["answers"], "words_to_answer": w}
            for q, w in zip(questions, per_q["words_to_answer"])]  # fmt: skip
    assert [question_score(r, "ar@100_short5") for r in rows] == [1.0, None, 0.0, 0.0]
    assert [question_score(r, "ar@100") for r in rows] == [1.0, 1.0, 0.0, 0.0]
    assert metric_label("answer_recall@100_short5") == "AR@100 (≤5-word answers)"
    columns = ["squad-train AR@100", "squad-train AR@100 (≤5-word answers)", "Avg AR@100"]
    assert answer_recall_metrics(columns) == ["ar@100", "ar@100_short5"]


def test_short_answer_metrics_of_a_real_cell(cells, squad_train):
    """The cells' rows: AR@100 on the questions with a shortest answer of <= 5 words equals
    what their per-question words to the answer give on that subset."""
    for d in cells.values():
        row = _row(d)
        pq = list(read_jsonl(d / "per_question.jsonl"))
        short = [q for q in pq if 0 < min(len(a.split()) for a in q["answers"]) <= 5]
        assert row["n_short_answer_questions"] == len(short) and 0 < len(short) < len(pq)
        found = [q["words_to_answer"] is not None and q["words_to_answer"] <= 100 for q in short]
        assert row["answer_recall@100_short5"] == pytest.approx(100 * np.mean(found), abs=1e-3)


def test_table2_and_the_paired_tests_carry_the_short_answer_columns(cells):
    from densex.analysis.sweep import analyze_sweep

    root = cells["passage"].parent
    analyze_sweep(root, n_resamples=200, seed=0)
    md = (root / "table2.md").read_text()
    assert "| SQuAD-train AR@100 (≤5-word answers) |" in md.replace("| SQuAD-train AR@100 |", "")
    assert "(SQuAD-train: N = 5," in md
    sig = (root / "significance.csv").read_text()
    assert "proposition,passage,AR@100 (≤5-word answers)," in sig


# --- configs and preflight -----------------------------------------------------------------------


def test_the_experiments_hold_their_cells():
    cfg = compose_config("evaluate", "experiment=squad-train-props", hydra=True)
    cells = [o for ov in grid_overrides(cfg) for o in ov if o.startswith("granularity=")]
    assert cells == [f"granularity={g}" for g in (*GRANULARITIES, "sentence-late", "mixed")]
    late = compose_config("evaluate", "experiment=squad-train-props", "granularity=sentence-late")
    assert late.retriever.late_chunking and granularity_name(late) == "sentence-late"
    assert late.corpus.name == "squad-train-props" and late.dataset.name == "squad-train"
    whole = compose_config("evaluate", "experiment=squad-train", hydra=True)
    cells = [o for ov in grid_overrides(whole) for o in ov if o.startswith("granularity=")]
    assert cells == ["granularity=passage", "granularity=sentence", "granularity=sentence-late"]
    assert whole.corpus.titles.include is None and whole.corpus.propositions is None


def test_preflight_names_the_missing_file_and_its_key(tmp_path):
    cfg = compose_config("evaluate", "experiment=squad-train-props", f"paths.data_dir={tmp_path}")
    with pytest.raises(PreflightError) as e:
        preflight(cfg, "evaluate")
    assert str(e.value) == (
        f"{tmp_path}/squad-train/passages.jsonl: file not found (corpus.passages)"
    )


def test_preflight_names_a_missing_titles_file(squad_train, tmp_path):
    cfg = compose_config("evaluate", "experiment=squad-train",
                         f"corpus.titles.exclude={tmp_path}/train.json")  # fmt: skip
    with pytest.raises(
        PreflightError, match=r"train\.json: file not found \(corpus\.titles\.exclude\)"
    ):
        preflight(cfg, "evaluate")


def test_a_filtered_cell_reuses_the_whole_corpus_generated_propositions(
    squad_train, tmp_path, monkeypatch
):
    """With a title filter and a model propositionizer, the propositions the model already
    wrote for the whole corpus (its units built, its file cached) are the filtered units'
    (rows outside the filter left out), not generated again; before the whole corpus's
    exist, the kept passages' are generated."""
    from densex.pipelines.index import units as stage

    passages = [p for p in read_jsonl(squad_train / "passages.jsonl") if p["title"] in ARTICLES]
    files = {name: tmp_path / f"{name}.jsonl" for name in ("passages", "kept", "whole")}
    files["passages"].write_text("".join(json.dumps(p) + "\n" for p in passages))
    for name, rows in (("kept", passages[:7]), ("whole", passages)):  # Matter: the first 7
        text = "".join(
            json.dumps({"id": p["id"], "propositions": [p["text"]]}) + "\n" for p in rows
        )
        files[name].write_text(text)
    generated: list[Path] = []
    monkeypatch.setattr(
        stage, "generated_propositions", lambda cfg, p: generated.append(p) or files["kept"]
    )
    monkeypatch.setattr(stage, "generated_propositions_path", lambda cfg, p: files["whole"])
    monkeypatch.setattr(stage, "_propositions_intact", lambda path: True)
    base = ["corpus=squad-train", f"corpus.passages={files['passages']}",
            "corpus.segmentation.spacy_model=null", f"paths.cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    filtered = compose_config("evaluate", *base, "corpus.titles.include=[Matter]")
    spec = stage.corpus_spec(filtered.corpus)
    assert stage.whole_corpus_propositions(filtered, spec) is None  # no whole-corpus units yet
    assert stage.build_corpus_units(filtered, with_generated=True).counts["proposition"] == 7
    assert len(generated) == 1  # the kept passages' propositions, generated
    whole = stage.corpus_spec(compose_config("evaluate", *base).corpus)
    stage.build_units(whole, stage.units_dir_for(whole, tmp_path / "cache"))  # its cells ran
    assert stage.whole_corpus_propositions(filtered, spec) == files["whole"]
    unit_files = stage.build_corpus_units(filtered, with_generated=True)
    assert len(generated) == 1 and unit_files.counts["proposition"] == 7  # none generated
    manifest = json.loads(Path(unit_files.manifest).read_text())
    assert manifest["outside_title_filter"] == {"proposition": 24}
