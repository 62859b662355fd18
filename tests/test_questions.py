"""Question loaders on every shipped format of the real data, HF layouts, and bad input."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tests.helpers.config import group_config

from densex.corpus.readers import Skips
from densex.data.questions import load_questions, questions_from_hf
from densex.data.regex_answers import UnmatchablePattern
from densex.metrics.answers import has_answer
from densex.utils.io import DataError
from helpers.typed import load_dataset_questions

REAL = {
    "nq": 3610,
    "nq-open": 3610,
    "tqa": 11313,
    "webq": 2032,
    "webq-brmson": 2032,
    "squad": 7541,
    "eq": 22075,
    "curated": 694,
    "squad-open": 7431,
}


def _dataset_cfg(repo_root: Path, shared_data: Path, name: str):
    cfg = OmegaConf.create(
        {
            "paths": OmegaConf.load(repo_root / "conf/paths/default.yaml"),
            "dataset": group_config("dataset", f"{name}"),
        }
    )
    cfg.paths.data_dir = str(shared_data)
    return cfg.dataset


@pytest.mark.parametrize(("name", "count"), REAL.items())
def test_dataset_configs_load_the_real_question_sets(repo_root, shared_data, name, count) -> None:
    cfg = _dataset_cfg(repo_root, shared_data, name)
    assert cfg.name == name
    rows = load_dataset_questions(cfg)
    assert len(rows) == count
    assert len({r["id"] for r in rows}) == count
    for r in rows:
        assert r["question"].strip() and r["question"] == r["question"].strip()
        assert r["answers"] and all(isinstance(a, str) and a.strip() for a in r["answers"])
    assert cfg.match == ("regex" if name == "curated" else "string")


def test_format_details_on_real_data(shared_data) -> None:
    qa = shared_data / "qa"
    nq = load_questions(qa / "nq/nq-test.dpr.tsv", "dpr-tsv", id_prefix="nq")
    assert nq[0] == {
        "id": "nq-0",
        "question": "who got the first nobel prize in physics",
        "answers": ["Wilhelm Conrad Röntgen"],
    }
    # NQ-open dev and DPR's NQ test are the same questions (DPR's are tokenised: "i 'll")
    nq_open = load_questions(qa / "nq/NQ-open.dev.jsonl", "nq-open")
    squash = lambda t: "".join(t.split())  # noqa: E731
    shared = {squash(r["question"]) for r in nq_open} & {squash(r["question"]) for r in nq}
    assert len(shared) > 3600
    # TriviaQA rows with CSV quoting ("") parse to the right list
    tqa = load_questions(qa / "tqa/trivia-test.dpr.tsv", "dpr-tsv")
    stereo = next(r for r in tqa if r["question"].startswith("In which decade did stereo"))
    assert "'30s" in stereo["answers"] and "1930's" in stereo["answers"]
    # both WebQuestions formats hold the same questions; brmson keeps its ids
    brmson = load_questions(qa / "webq/webquestions-test.brmson.json", "webq-brmson")
    dpr = load_questions(qa / "webq/wq-test.dpr.jsonl", "dpr-jsonl")
    assert brmson[0]["id"] == "wqs000000"
    assert [r["question"] for r in brmson] == [r["question"] for r in dpr]
    # EntityQuestions: 24 relations from a directory, or one relation file
    eq = load_questions(qa / "eq", "eq", id_prefix="eq")
    assert len({r["relation"] for r in eq}) == 24
    p19 = load_questions(qa / "eq/P19.test.json", "eq")
    assert {r["relation"] for r in p19} == {"P19"} and p19[0]["question"].endswith("born?")
    assert [r["question"] for r in eq if r["relation"] == "P19"] == [r["question"] for r in p19]
    # DPR SQuAD: duplicates removed, order kept; the limit is honoured
    squad = load_questions(qa / "squad/squad-test.dpr.jsonl", "dpr-jsonl", limit=5)
    assert len(squad) == 5 and squad[0]["answers"] == ["24–10"]


def test_squad_json_matches_the_project_jsonl(squad_open) -> None:
    from_json = load_questions(squad_open / "squad-dev-v1.1.json", "squad")
    from_jsonl = load_questions(squad_open / "questions.jsonl", "jsonl")
    assert [r["id"] for r in from_json] == [r["id"] for r in from_jsonl]
    assert all(set(a["answers"]) == set(b["answers"]) for a, b in zip(from_json, from_jsonl))


def test_hf_column_layouts(tmp_path) -> None:
    import datasets  # a core dependency: its absence is an error, not a skip

    nq = datasets.Dataset.from_dict({"question": ["q1", "q2"], "answer": [["a"], ["b", "b", "c"]]})
    assert questions_from_hf(nq, "nq_open", id_prefix="nq") == [
        {"id": "nq-0", "question": "q1", "answers": ["a"]},
        {"id": "nq-1", "question": "q2", "answers": ["b", "c"]},
    ]
    tqa = datasets.Dataset.from_dict(
        {
            "question": ["Who?"],
            "question_id": ["tc_1"],
            "answer": [{"value": "Sunset Blvd", "aliases": ["Sunset Boulevard", "Sunset Blvd"]}],
        }
    )
    assert questions_from_hf(tqa, "trivia_qa") == [
        {"id": "tc_1", "question": "Who?", "answers": ["Sunset Blvd", "Sunset Boulevard"]}
    ]
    webq = datasets.Dataset.from_dict({"url": ["u"], "question": ["w?"], "answers": [["x"]]})
    assert questions_from_hf(webq, "web_questions", id_prefix="wq")[0]["id"] == "wq-0"
    squad = datasets.Dataset.from_dict(
        {
            "id": ["s1"],
            "title": ["T"],
            "context": ["c"],
            "question": ["s?"],
            "answers": [{"text": ["Paris", "Paris"], "answer_start": [0, 0]}],
        }
    )
    assert questions_from_hf(squad, "squad") == [
        {"id": "s1", "question": "s?", "answers": ["Paris"]}
    ]
    # through load_questions: a save_to_disk DatasetDict, split chosen, layout from the id
    saved = tmp_path / "trivia_qa"
    datasets.DatasetDict({"validation": tqa}).save_to_disk(str(saved))
    rows = load_questions(saved, "hf", split="validation")
    assert rows[0]["answers"] == ["Sunset Blvd", "Sunset Boulevard"]
    with pytest.raises(ValueError, match="split"):
        load_questions(saved, "hf")
    # a row without answers names its row and field
    bad = datasets.Dataset.from_dict({"question": ["q1", "q2"], "answer": [["a"], []]})
    with pytest.raises(DataError) as err:
        questions_from_hf(bad, "nq_open", source="nq_open[validation]")
    assert (err.value.path, err.value.field) == ("nq_open[validation]", "[1].answer")


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "fmt", "text", "line", "field", "message"),
    [
        (
            "a.jsonl",
            "nq-open",
            '{"question": "q", "answer": ["a"]}\n{"question": "q", "answer": [}\n',
            2,
            None,
            "invalid JSON",
        ),
        (
            "b.jsonl",
            "nq-open",
            '{"question": "q", "answer": ["a"]}\n{"question": "q2"}\n',
            2,
            "answer",
            "missing",
        ),
        ("c.jsonl", "nq-open", '{"question": " ", "answer": ["a"]}\n', 1, "question", "empty"),
        ("d.jsonl", "nq-open", '{"question": "q", "answer": []}\n', 1, "answer", "no answers"),
        ("e.jsonl", "nq-open", '{"question": "q", "answer": ["a", ""]}\n', 1, "answer[1]", "empty"),
        (
            "f.jsonl",
            "jsonl",
            '{"id": "1", "question": "q", "answers": ["a"]}\n{"question": "q", "answers": ["a"]}\n',
            2,
            "id",
            "missing",
        ),
        (
            "g.jsonl",
            "jsonl",
            '{"id": "1", "question": "q", "answers": ["a"]}\n{"id": "1", "question": "r", "answers": ["b"]}\n',
            2,
            "id",
            "duplicate",
        ),
        ("h.tsv", "dpr-tsv", "q1\t['a']\nq2\tnot a list\n", 2, "answers", "list literal"),
        ("i.tsv", "dpr-tsv", "q1\t['a']\tthird\n", 1, None, "2 tab-separated columns"),
        ("j.tsv", "dpr-tsv", "q1\t'just a string'\n", 1, "answers", "expected a list"),
        (
            "k.json",
            "webq-brmson",
            '[{"qId": "w1", "qText": "q", "answers": ["a"]}, {"qId": "w2", "answers": ["a"]}]',
            None,
            "[1].question",
            "missing",
        ),
        (
            "P1.test.json",
            "eq",
            '[{"question": "q", "answers": ["a"]}, {"question": "r", "answers": [""]}]',
            None,
            "[1].answers[0]",
            "empty",
        ),
    ],
)
def test_bad_input_is_located(tmp_path, name, fmt, text, line, field, message) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(DataError, match=message) as err:
        load_questions(path, fmt)
    assert (err.value.path, err.value.line, err.value.field) == (str(path), line, field)


def test_skip_mode_counts_every_skip(tmp_path) -> None:
    path = _write(
        tmp_path,
        "q.jsonl",
        '{"question": "q0", "answer": ["a"]}\n'
        "not json\n"
        '{"question": "q2", "answer": ["", "b"]}\n'
        '{"question": "q3", "answer": []}\n',
    )
    skips = Skips("skip")
    rows = load_questions(path, "nq-open", on_error="skip", skips=skips)
    assert [r["id"] for r in rows] == ["q-0", "q-2"]  # ids keep the record index
    assert rows[1]["answers"] == ["b"]
    assert skips.total == 3 and skips.by_field == {"record": 1, "answer[]": 1, "answer": 1}
    with pytest.raises(ValueError, match="on_error"):
        load_questions(path, "nq-open", on_error="ignore")
    with pytest.raises(ValueError, match="unknown question format"):
        load_questions(path, "csv")
    with pytest.raises(DataError, match="file not found"):
        load_questions(tmp_path / "missing.tsv", "dpr-tsv")


def test_regex_datasets_reject_invalid_patterns(tmp_path) -> None:
    path = _write(tmp_path, "trec.jsonl", '{"question": "q", "answer": ["ok|fine", "(broken"]}\n')
    cfg = {"name": "trec", "path": str(path), "format": "dpr-jsonl", "match": "regex"}
    with pytest.raises(DataError, match="invalid regex") as err:
        load_dataset_questions(cfg)
    assert err.value.field == "answers[1]"
    assert err.value.line == 1
    assert load_dataset_questions({**cfg, "match": "string"})[0]["answers"] == [
        "ok|fine",
        "(broken",
    ]


def test_curated_patterns_broken_by_nfd_are_reported(repo_root, shared_data, caplog) -> None:
    """The loader compiles what the scorer compiles (NFD-normalised): exactly three shipped
    CuratedTREC patterns compile as written but not so, and never match, as in DPR."""
    cfg = _dataset_cfg(repo_root, shared_data, "curated")
    found: list[UnmatchablePattern] = []
    with caplog.at_level(logging.WARNING, logger="densex.data.questions"):
        rows = load_dataset_questions(cfg, unmatchable=found)
    assert len(rows) == 694  # kept: DPR parity, they score as misses
    assert [(u.line, u.question_id, u.field) for u in found] == [
        (159, "curated-158", "answers[0]"),
        (520, "curated-519", "answers[0]"),
        (680, "curated-679", "answers[0]"),
    ]
    by_id = {r["id"]: r for r in rows}
    assert [by_id[u.question_id]["question"] for u in found] == [
        "What is the highest mountain in the Czech Republic?",
        "Who was the president of Vichy France?",
        "Who is the tallest man in the world?",
    ]
    assert all("bad escape" in u.error and u.source == cfg.path for u in found)
    for u in found:
        assert f"{cfg.path}:{u.line}" in caplog.text
        assert u.pattern == by_id[u.question_id]["answers"][0]
    assert "3 regex answers of 3 questions never match" in caplog.text
    # and scoring agrees: not even the plain alternative "Petain" matches
    assert not has_answer([found[1].pattern], "Marshal Petain led Vichy France", "regex")


def test_nfd_broken_regex_is_kept_and_located(tmp_path, caplog) -> None:
    broken = "P\\\u00e9tain|Petain"  # compiles; NFD gives "P\\e" + U+0301, a bad escape
    records = [
        {"question": "q0", "answers": ["fine"]},
        {"question": "q1", "answers": ["ok", broken]},
    ]
    path = _write(tmp_path, "trec.json", json.dumps(records))
    cfg = {"name": "trec", "path": str(path), "format": "eq", "match": "regex"}
    found: list[UnmatchablePattern] = []
    with caplog.at_level(logging.WARNING, logger="densex.data.questions"):
        rows = load_dataset_questions(cfg, unmatchable=found)
    assert rows[1]["answers"] == ["ok", broken]
    assert [(u.line, u.field, u.question_id) for u in found] == [(None, "[1].answers[1]", "trec-1")]
    assert f"{path} [1].answers[1]" in caplog.text
    assert load_dataset_questions({**cfg, "match": "string"}) == rows  # string mode: no check
    assert load_dataset_questions(cfg) == rows  # without the out-list: logged, nothing raised
