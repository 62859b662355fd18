"""The propositionizer's teacher pairs from two sources (issue 45): the experiment's
`data.sources` read alike, the article splits (validation carved from squad-train's
propositionized articles, test unchanged), percent-encoded SQuAD titles, the learning curve's
`data.train_articles`, the retrieval validation's questions and per-question scores, and the
held-out corpora of `scripts/heldout_split.py`. On the real shared data: skipped where
`../shared/data/squad-train` is absent, a failure under CI=true."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest

from densex.data.squad_articles import article_questions, passage_title, shortest_answer_words
from densex.pipelines.train.sources import pair_sources
from densex.propositionizer.data import PropositionDataModule
from densex.propositionizer.pairs import load_squad_open_pairs, split_articles, split_source
from densex.propositionizer.sources import SourceSplits, first_articles, read_sources
from helpers.config import compose_config

TEST_TITLES = {"1973 oil crisis", "French and Indian War", "Genghis Khan", "Prime number", "Rhine"}
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "heldout_split.py"


@pytest.fixture(scope="module")
def cfg(squad_open: Path, squad_train: Path):
    return compose_config(
        "train", "experiment=propositionizer-copy-cpu", f"paths.data_dir={squad_open.parent}"
    )


@pytest.fixture(scope="module")
def sources(cfg):
    return pair_sources(cfg.data.sources)


@pytest.fixture(scope="module")
def splits(sources) -> SourceSplits:
    return read_sources(sources)


def _titles(pairs) -> set[str]:
    return {p["title"] for p in pairs}


def _module(sources, **kw) -> PropositionDataModule:
    kw = {"format": "sources", "sources": sources, "val_fraction": None, "test_fraction": None,
          "spacy_model": None, **kw}  # fmt: skip
    dm = PropositionDataModule(**kw)
    dm.load_pairs()
    return dm


def test_the_experiment_reads_both_sources_alike(cfg, sources, squad_train):
    """One list of sources in the data config, read by the callback too; both sources' training
    passages become per-sentence pairs through the same code (format, context, alignment)."""
    assert cfg.data.format == "sources" and [s.name for s in sources] == [
        "squad-open",
        "squad-train",
    ]
    assert pair_sources(cfg.callbacks.retrieval_validation.sources) == sources
    dm = _module(sources, train_articles=12, sentence_pairs=True, passage_pairs=False,
                 context_sentences=-1)  # fmt: skip
    propositionized = set(json.loads((squad_train / "propositionized_titles.json").read_text()))
    titles = _titles(dm.train_pairs)
    assert len(titles) == 12 and titles & propositionized and titles - propositionized
    for title in titles:  # each article's per-sentence pairs in the inference format
        mine = [p for p in dm.train_pairs if p["title"] == title]
        assert all("::s" in p["id"] and split_source(p["source"])[0] == title for p in mine)
        assert any(" Context: " in p["source"] for p in mine)
        assert all(json.loads(p["target"]) for p in mine)


def test_validation_is_carved_from_squad_train_and_test_is_unchanged(splits, squad_open, sources):
    open_pairs = load_squad_open_pairs(squad_open / "passages.jsonl", squad_open / "propositions.jsonl")  # fmt: skip
    old_test = split_articles(open_pairs, 0.1, 0.1)[2]
    train, val, test = (_titles(x) for x in (splits.train, splits.validation, splits.test))
    assert not (train & val or train & test or val & test)
    assert test == _titles(old_test) == TEST_TITLES
    assert sorted(p["id"] for p in splits.test) == sorted(p["id"] for p in old_test)
    assert len(splits.test) == 268
    squad = sources[0]
    assert len(article_questions(squad.squad_json, squad.questions, test)) == 967
    assert not val & _titles(open_pairs)  # validation: squad-train's articles only
    assert len(val) >= 20 and len(splits.validation) == 1086
    st = sources[1]
    questions = article_questions(st.squad_json, st.questions, val)
    short = [q for q in questions if shortest_answer_words(q["answers"]) <= 5]
    assert (len(questions), len(short)) == (3947, 3060)
    assert (len(train), len(splits.train)) == (165, 8266)  # 31 squad-open + 134 squad-train
    assert len(train & _titles(open_pairs)) == 31


def test_percent_encoded_titles_find_their_questions(squad_train, sources):
    """SQuAD train's JSON spells some titles percent-encoded (`Bras%C3%ADlia`); the passages
    and propositionized titles spell them decoded, and each finds its own questions."""
    squad = json.loads((squad_train / "squad-train-v1.1.json").read_text())["data"]
    asked = {passage_title(a["title"]): sum(len(p["qas"]) for p in a["paragraphs"]) for a in squad}
    propositionized = json.loads((squad_train / "propositionized_titles.json").read_text())
    encoded = [a["title"] for a in squad if "%" in a["title"]]
    decoded = [passage_title(t) for t in encoded if passage_title(t) in propositionized]
    assert decoded and all("%" not in t and "_" not in t for t in decoded)
    st = sources[1]
    found = article_questions(st.squad_json, st.questions, decoded)
    assert len(found) == sum(asked[t] for t in decoded) and all(asked[t] for t in decoded)
    assert len(article_questions(st.squad_json, st.questions, propositionized)) == 25243


def test_train_articles_keeps_the_first_n_in_a_fixed_order(splits, sources):
    train = splits.train
    shuffled = random.Random(0).sample(train, len(train))
    nested = [_titles(first_articles(train, n)) for n in (27, 80, 165)]
    assert [len(t) for t in nested] == [27, 80, 165] and nested[0] < nested[1] < nested[2]
    assert _titles(first_articles(shuffled, 27)) == nested[0]  # not the file order
    documented = sorted(nested[2], key=lambda t: hashlib.sha1(f"densex/train-articles/{t}".encode()).hexdigest())  # fmt: skip
    assert nested[0] == set(documented[:27]) and nested[1] == set(documented[:80])
    kept = first_articles(train, 27)
    assert len(kept) == sum(p["title"] in nested[0] for p in train)  # whole articles
    assert nested[0] & _titles(splits.train[:1935]) and nested[0] - _titles(splits.train[:1935])
    with pytest.raises(ValueError, match="has 165 articles"):
        first_articles(train, 166)
    dm = _module(sources, train_articles=27, passage_pairs=True)
    assert _titles(dm.train_pairs) == nested[0]
    assert _titles(dm.val_pairs_all) == _titles(splits.validation)  # validation unchanged


def test_retrieval_validation_loads_the_questions_of_every_source(cfg, splits, sources):
    from densex.pipelines.train.retrieval_validation import RetrievalValidation

    callback = RetrievalValidation(sources=cfg.callbacks.retrieval_validation.sources)
    val = sorted(_titles(splits.validation))
    few = val[:3] + sorted(TEST_TITLES)[:1]  # squad-train and squad-open articles alike
    got = callback.questions(few)
    want = [q for s in sources for q in article_questions(s.squad_json, s.questions, few)]
    assert [q["id"] for q in got] == [q["id"] for q in want] and len(got) > 300
    from_train = [q["id"].startswith("squadexp11-train-") for q in got]
    assert any(from_train) and not all(from_train)
    assert [q["short"] for q in got] == [0 < shortest_answer_words(q["answers"]) <= 5 for q in want]
    assert 0 < sum(q["short"] for q in got) < len(got)
    with pytest.raises(ValueError, match="no source with a squad_json"):
        RetrievalValidation(sources=[{"name": "x", "passages": "p", "propositions": "q"}])


def test_validation_scores_judge_answer_recall_on_short_questions():
    """Ranks, answer words and the paired tests of `validation_metrics` on a hand-made index
    (no model): AR@l counts the short questions only, AR@l_all every one."""
    from densex.pipelines.train.validation_metrics import (
        paired_tests,
        question_scores,
        recall_metrics,
    )

    passages = ["alpha beta gamma", "delta epsilon", "zeta eta theta"]
    texts = ["alpha", "beta gamma", "delta epsilon", "zeta", "eta theta"]
    owners = [0, 0, 1, 2, 2]
    vectors = np.eye(5, dtype=np.float32)
    questions = [
        {"question": "q0", "answers": ["gamma"]},  # its passage first, 3 words in
        {"question": "q1", "answers": ["theta"]},  # passage 2 second, 4 words in
        {"question": "q2", "answers": ["a very long clause answer of many words"]},
    ]
    qvec = {"q0": vectors[0], "q1": vectors[2] + 0.5 * vectors[4], "q2": vectors[1]}
    scores = question_scores(vectors, (owners, texts), questions, qvec, passages, 5, 5)
    assert scores.rank.tolist() == [0, 1, 5] and scores.words.tolist() == [3, 4, 6]
    q3 = {"question": "q3", "answers": ["beta"]}  # in the third unit, past the ranked depth 1
    deep = question_scores(vectors, (owners, texts), [q3], {"q3": vectors[3] + 0.5 * vectors[0]},
                           passages, 1, 5)  # fmt: skip
    assert deep.rank.tolist() == [1] and deep.words.tolist() == [3]
    short = np.array([True, False, False])
    got = recall_metrics(scores, short, (1, 5), "val/")
    assert got == pytest.approx({"val/R@1": 100 / 3, "val/R@5": 200 / 3, "val/AR@5": 100.0,
                                 "val/AR@5_all": 200 / 3})  # fmt: skip
    tests = paired_tests(scores, scores, short, n_resamples=100)
    assert set(tests) == {"R@1", "R@5", "AR@5"} and tests["AR@5"]["n"] == 1
    assert all(t["diff"] == 0 and t["p_randomization"] == 1.0 for t in tests.values())


def test_heldout_split_writes_validation_and_test_corpora(sources, tmp_path):
    spec = importlib.util.spec_from_file_location("heldout_split", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.config_sources(script.SOURCES, Path(sources[0].passages).parents[1]) == sources
    counts = script.heldout_split(sources, tmp_path)
    assert counts["validation"]["all"] == counts["validation"]["squad-train"] == {
        "articles": 22, "passages": 1086, "propositions": 8600, "questions": 3947,
        "short-answer": 3060}  # fmt: skip
    assert counts["test"]["all"] == counts["test"]["squad-open"] == {
        "articles": 5, "passages": 268, "propositions": 2174, "questions": 967,
        "short-answer": 925}  # fmt: skip
    rows = {
        (split, name): [json.loads(x) for x in (tmp_path / split / f"{name}.jsonl").open()]
        for split in ("validation", "test")
        for name in ("passages", "propositions", "questions", "short_questions")
    }
    for split in ("validation", "test"):
        ids = [p["id"] for p in rows[split, "passages"]]
        assert ids == [p["id"] for p in rows[split, "propositions"]]
        assert {q["id"] for q in rows[split, "short_questions"]} <= {
            q["id"] for q in rows[split, "questions"]}  # fmt: skip
        assert all(set(q) == {"id", "question", "answers"} for q in rows[split, "questions"])
    assert not {p["title"] for p in rows["validation", "passages"]} & TEST_TITLES
    titles = json.loads((tmp_path / "split.json").read_text())["titles"]
    assert set(titles["test"]) == TEST_TITLES and len(titles["validation"]) == 22


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_partial_source_skips_whole_articles_only(tmp_path):
    """`partial`: an article without propositions makes no pair; a passage missing from an
    article that has some is still a located error; two sources may not share an article."""
    from densex.propositionizer.sources import PairSource
    from densex.utils.io import DataError

    passages = _jsonl(tmp_path / "p.jsonl", [
        {"id": "A#0-0", "title": "A", "text": "a."}, {"id": "A#1-0", "title": "A", "text": "b."},
        {"id": "B#0-0", "title": "B", "text": "c."}])  # fmt: skip
    props = _jsonl(tmp_path / "q.jsonl", [{"id": "A#0-0", "propositions": ["a."]}])
    with pytest.raises(DataError, match="A#1-0") as e:
        load_squad_open_pairs(passages, props, partial=True)
    assert (e.value.line, e.value.field) == (2, "id")
    _jsonl(tmp_path / "q.jsonl", [{"id": i, "propositions": ["x."]} for i in ("A#1-0", "A#0-0")])
    assert [p["id"] for p in load_squad_open_pairs(passages, props, partial=True)] == ["A#1-0", "A#0-0"]  # fmt: skip
    with pytest.raises(DataError, match="B#0-0"):
        load_squad_open_pairs(passages, props)
    one = PairSource("one", passages, props, partial=True)
    with pytest.raises(ValueError, match="article 'A' is in 'one' and 'two'"):
        read_sources([one, PairSource("two", passages, props, partial=True)])


def test_the_earlier_protocol_is_the_old_squad_open_split(squad_open):
    """`experiment=propositionizer-copy-squad-open` (the student the README's table reports)
    splits squad-open's pairs exactly as `pairs.split_articles(pairs, 0.3125, 0.1)` did."""
    cfg = compose_config(
        "train", "experiment=propositionizer-copy-squad-open", f"paths.data_dir={squad_open.parent}"
    )
    got = read_sources(pair_sources(cfg.data.sources))
    pairs = load_squad_open_pairs(squad_open / "passages.jsonl", squad_open / "propositions.jsonl")
    old = split_articles(pairs, 0.3125, 0.1)
    for new_split, old_split in zip((got.train, got.validation, got.test), old):
        assert [p["id"] for p in new_split] == [p["id"] for p in old_split]
    assert [len(_titles(x)) for x in old] == [27, 4, 5]
    assert cfg.trainer.val_check_interval == 500


def test_learning_curve_counts_each_runs_articles_and_reads_its_exported_step(
    cfg, splits, tmp_path
):
    """`scripts/learning_curve.py`: each run's training articles and passages from its saved
    config (the splits train.py uses, `data.train_articles` first), the validation of the step
    it exported (not a later or earlier one), rows by articles, the sentences' row last; a run
    that has not finished is a DataError naming its summary."""
    from omegaconf import OmegaConf

    from densex.utils.io import DataError

    spec = importlib.util.spec_from_file_location("learning_curve", SCRIPT.with_name("learning_curve.py"))  # fmt: skip
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    data = OmegaConf.to_container(cfg.data, resolve=True)

    def run(name: str, n: int | None, step: int, r5: float) -> Path:
        d = tmp_path / name
        (d / ".hydra").mkdir(parents=True)
        OmegaConf.save({"data": {**data, "train_articles": n}}, d / ".hydra" / "config.yaml")
        (d / "train_summary.json").write_text(json.dumps({"best_global_step": step}))
        for s, value in ((step, r5), (step + 750, 0.0)):  # a later, worse validation is ignored
            metrics = {"val/ps_set_f1": 0.8, "val/R@1": 70.0, "val/R@5": value, "val/R@20": 97.0,
                       "val/AR@100": 80.0, "val/props_per_passage": 7.0,
                       **{f"val/sentence_{k}": 90.0 for k in ("R@1", "R@5", "R@20", "AR@100")}}  # fmt: skip
            tests = {k: {"diff": -1.0, "ci_low": -2.0, "ci_high": 0.5, "p_randomization": 0.2}
                     for k in ("R@1", "R@5", "AR@100")}  # fmt: skip
            out = d / "val_propositions" / f"epoch=003-step={s:06d}.json"
            out.parent.mkdir(exist_ok=True)
            out.write_text(json.dumps({"metrics": metrics, "paired_tests": tests}))
        return d

    runs = [run("all", None, 1500, 93.0), run("few", 27, 1500, 91.0)]
    assert script.main([str(r) for r in runs] + ["--out", str(tmp_path / "lc" / "curve")]) == 0
    lines = (tmp_path / "lc" / "curve.md").read_text().splitlines()
    few = first_articles(splits.train, 27)
    assert lines[2].startswith(f"| 27 | {len({p['id'] for p in few}):,} | 0.800 | 7.0 | 70.0 (-1.0")
    assert "| 91.0 (-1.0 [-2.0, +0.5]) |" in lines[2] and "| 93.0 (" in lines[3]
    assert lines[3].startswith(f"| {len(_titles(splits.train))} | {len({p['id'] for p in splits.train}):,} |")  # fmt: skip
    assert lines[4] == "| sentences | | | | 90.0 | 90.0 | 90.0 | 90.0 |"
    assert (tmp_path / "lc" / "curve.png").stat().st_size > 0
    (runs[0] / "train_summary.json").unlink()
    with pytest.raises(DataError, match="train_summary.json"):
        script.run_point(runs[0])
