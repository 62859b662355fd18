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
