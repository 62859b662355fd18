"""`scripts/heldout_split.py --with-train` and `scripts/distill_targets.py`: the training
articles written as a corpus of their own, then a model's propositions for them merged into
the teacher's file (sequence-level distillation's targets), on the real squad-open data."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from densex.utils.io import DataError

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def held(squad_open: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The experiment's squad-open source split as the script writes it (its other source,
    squad-train, has tests of its own: test_pair_sources.py)."""
    out, split = tmp_path_factory.mktemp("held"), _script("heldout_split")
    every = split.config_sources(split.SOURCES, squad_open.parent)
    sources = [s for s in every if s.name == "squad-open"]
    split.heldout_split(sources, out, with_train=True)
    return out


def test_the_three_splits_are_disjoint_by_article_and_cover_the_corpus(held, squad_open):
    titles = {s: {p["title"] for p in _rows(held / s / "passages.jsonl")} for s in
              ("train", "validation", "test")}  # fmt: skip
    assert not (titles["train"] & titles["validation"] or titles["train"] & titles["test"])
    ids = [p["id"] for s in titles for p in _rows(held / s / "passages.jsonl")]
    assert sorted(ids) == sorted(p["id"] for p in _rows(squad_open / "passages.jsonl"))
    assert len(titles["train"]) == 31 and not titles["validation"] and len(titles["test"]) == 5


def test_the_student_rows_replace_the_teachers_and_nothing_else(held, squad_open, tmp_path):
    teacher = squad_open / "propositions.jsonl"
    student = tmp_path / "student.jsonl"
    mine = {r["id"]: [p.upper() for p in r["propositions"][:2]]
            for r in _rows(held / "train" / "propositions.jsonl")}  # fmt: skip
    student.write_text("".join(json.dumps({"id": i, "propositions": v}) + "\n"
                               for i, v in reversed(mine.items())))  # fmt: skip
    out = tmp_path / "distill" / "propositions.jsonl"
    counts = _script("distill_targets").distill_targets(teacher, student, out)
    before, after = _rows(teacher), _rows(out)
    assert counts == {"rows": len(before), "replaced": len(mine)}
    assert [r["id"] for r in after] == [r["id"] for r in before]  # the teacher's order
    for old, new in zip(before, after):
        want = mine.get(old["id"], old["propositions"])
        assert new == {**old, "propositions": want}
    held_out = {r["id"] for s in ("validation", "test") for r in _rows(held / s / "passages.jsonl")}
    assert held_out and not held_out & set(mine)  # validation and test keep the teacher's


def test_a_student_row_of_another_corpus_is_located(squad_open, tmp_path):
    student = tmp_path / "student.jsonl"
    first = _rows(squad_open / "propositions.jsonl")[0]
    student.write_text(json.dumps(first) + "\n" + json.dumps({"id": "Nowhere#0-0",
                       "propositions": ["x"]}) + "\n")  # fmt: skip
    out = tmp_path / "out.jsonl"
    with pytest.raises(DataError, match=r"student\.jsonl:2: field 'id': 'Nowhere#0-0'"):
        _script("distill_targets").distill_targets(squad_open / "propositions.jsonl", student, out)
    assert list(tmp_path.iterdir()) == [student]  # nothing written, no temporary file left


# --- both sources: HELD/train of data=squad-sources ------------------------------------------


@pytest.fixture
def held_two(tmp_path: Path) -> tuple[Path, list]:
    """`heldout_split --with-train` of two small sources split as the experiment's are (one
    with test articles, one with validation articles), in `tmp_path / "HELD"`."""
    from densex.propositionizer.sources import PairSource

    sources = []
    for name, val, test in (("open", 0.0, 0.3), ("train", 0.3, 0.0)):
        rows = [{"id": f"{name}-{t}#{k}", "title": f"{name} {t}", "text": f"Fact {k} of {t}."}
                for t in range(5) for k in range(2)]  # fmt: skip
        props = [{"id": r["id"], "propositions": [r["text"], "More."]} for r in rows]
        for file, lines in (("passages", rows), ("propositions", props)):
            (tmp_path / f"{name}-{file}.jsonl").write_text(
                "".join(json.dumps(x) + "\n" for x in lines))  # fmt: skip
        sources.append(PairSource(name, str(tmp_path / f"{name}-passages.jsonl"),
                                  str(tmp_path / f"{name}-propositions.jsonl"),
                                  val_fraction=val, test_fraction=test))  # fmt: skip
    _script("heldout_split").heldout_split(sources, tmp_path / "HELD", with_train=True)
    return tmp_path / "HELD", sources


def _student(path: Path, rows: list[dict]) -> dict[str, list[str]]:
    """A model's propositions for `rows` (reversed order, text changed), written to `path`."""
    mine = {r["id"]: [p.upper() for p in r["propositions"][:1]] for r in rows}
    path.write_text("".join(json.dumps({"id": i, "propositions": v}) + "\n"
                            for i, v in reversed(mine.items())))  # fmt: skip
    return mine


def test_the_training_articles_of_every_source_get_the_students_targets(held_two, tmp_path):
    held, sources = held_two
    mine = _student(tmp_path / "student.jsonl", _rows(held / "train" / "propositions.jsonl"))
    out = tmp_path / "DISTILL"
    distill = _script("distill_targets")
    counts = distill.distill_held(held, tmp_path / "student.jsonl", out)
    held_out = {r["id"] for s in ("validation", "test") for r in _rows(held / s / "passages.jsonl")}
    for s in sources:
        before = _rows(Path(s.propositions))
        after = _rows(out / s.name / "propositions.jsonl")
        replaced = [r["id"] for r in before if r["id"] in mine]
        assert counts[s.name] == {"rows": len(before), "replaced": len(replaced)} and replaced
        assert [r["id"] for r in after] == [r["id"] for r in before]  # the teacher's order
        for old, new in zip(before, after):
            assert new == {**old, "propositions": mine.get(old["id"], old["propositions"])}
        assert {r["id"] for r in before} & held_out  # each source keeps held-out passages...
    assert not held_out & set(mine)  # ...with the teacher's propositions
    assert sum(c["replaced"] for c in counts.values()) == len(mine)
    assert distill.train_overrides(held, out) == [
        f"data.sources.0.propositions={out}/open/propositions.jsonl",
        f"data.sources.1.propositions={out}/train/propositions.jsonl",
    ]


def test_a_student_row_of_a_held_out_passage_is_located_and_nothing_written(held_two, tmp_path):
    held, _ = held_two
    rows = _rows(held / "train" / "propositions.jsonl")[:3] + _rows(
        held / "validation" / "propositions.jsonl")[:1]  # fmt: skip
    _student(tmp_path / "student.jsonl", rows)  # reversed: the validation row is line 1
    out = tmp_path / "DISTILL"
    with pytest.raises(DataError, match=rf"student\.jsonl:1: field 'id': '{rows[-1]['id']}' is "
                       r"not in .*HELD/train/passages\.jsonl \(the training articles\)"):  # fmt: skip
        _script("distill_targets").distill_held(held, tmp_path / "student.jsonl", out)
    assert not out.exists()


def test_a_split_without_its_training_articles_says_how_to_write_them(held_two, tmp_path):
    held, _ = held_two
    (held / "train" / "passages.jsonl").unlink()
    _student(tmp_path / "student.jsonl", [])
    with pytest.raises(DataError, match=r"heldout_split\.py --out HELD --with-train"):
        _script("distill_targets").distill_held(held, tmp_path / "student.jsonl", tmp_path / "o")


def test_the_command_line_takes_held_and_prints_the_train_overrides(held_two, tmp_path,
                                                                     monkeypatch, capsys):  # fmt: skip
    held, _ = held_two
    _student(tmp_path / "student.jsonl", _rows(held / "train" / "propositions.jsonl"))
    argv = ["distill_targets.py", "--held", str(held), "--student",
            str(tmp_path / "student.jsonl"), "--out", str(tmp_path / "DISTILL")]  # fmt: skip
    monkeypatch.setattr("sys.argv", argv)
    _script("distill_targets").main()
    counts, command = capsys.readouterr().out.splitlines()
    assert set(json.loads(counts)) == {"open", "train"}
    assert command.startswith("train.py data.sources.0.propositions=")
