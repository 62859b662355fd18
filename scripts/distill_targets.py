"""Training targets for sequence-level distillation of a propositionizer (Kim and Rush, 2016).

Writes propositions files that are the teacher's except for the passages a model
propositionized (`--student`, the `propositions.jsonl` the pipeline wrote into its cache for
those passages): those rows carry the model's propositions. train.py then trains on the
model's outputs for the training articles while the validation and test articles keep the
teacher's. Rows stay in the teacher file's order.

`--held HELD` (what `scripts/heldout_split.py --out HELD --with-train` wrote): the teacher
files are those of every source the split read (`HELD/split.json`: squad-open's and
squad-train's, with `data=squad-sources`), one output per source,
`OUT/<source name>/propositions.jsonl`, and every student row must be a passage of the
training articles (`HELD/train/passages.jsonl`), so no validation or test passage gets the
model's propositions. `--teacher FILE` instead: one teacher file, `--out` the output file. A
student row that is not a training passage, or that no teacher file has, is an error naming
the file and line, and nothing is written:

    python scripts/heldout_split.py --out HELD --with-train          # HELD/train/passages.jsonl
    python index.py stage=units corpus.passages=HELD/train/passages.jsonl corpus.propositions=null \
        propositionizer=model propositionizer.model=RUN/hf_model ...  # the decoding to distil
    python scripts/distill_targets.py --held HELD \
        --student CACHE/propositions/model/<key>/propositions.jsonl --out DISTILL
    python train.py experiment=propositionizer-copy-cpu ... \
        data.sources.0.propositions=DISTILL/squad-open/propositions.jsonl \
        data.sources.1.propositions=DISTILL/squad-train/propositions.jsonl

(the script prints those `data.sources.<i>.propositions` overrides). docs/propositionizer.md
("Trained on its own beam outputs") has the whole recipe.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from densex.propositionizer.sources import PairSource
from densex.utils.io import DataError, numbered_jsonl, read_json, write_jsonl

FIELDS = ("id", "propositions")
HELD_HINT = "python scripts/heldout_split.py --out HELD --with-train"


def read_student(student: Path) -> dict[str, tuple[int, Any]]:
    """`{id: (line, propositions)}` of the student's propositions file."""
    return {row["id"]: (line, row["propositions"])
            for line, row in numbered_jsonl(student, required=FIELDS)}  # fmt: skip


def file_ids(path: Path, required: tuple[str, ...] = FIELDS) -> set[str]:
    """The ids of a JSONL file's rows (streamed; rows checked for `required`)."""
    return {row["id"] for _, row in numbered_jsonl(path, required=required, nonempty=("id",))}


def check_known(
    student: Path, theirs: Mapping[str, tuple[int, Any]], known: set[str], where: str
) -> None:
    """Every student id is in `known` (the ids of `where`); the first one (by line) that is
    not is a `DataError` at its line of `student`."""
    if unknown := [i for i in theirs if i not in known]:
        first = min(unknown, key=lambda i: theirs[i][0])
        raise DataError(student, theirs[first][0], "id", f"{first!r} is not in {where}")


def merge(teacher: Path, theirs: Mapping[str, Any], out: Path) -> int:
    """Write `out` (atomically): `teacher`'s rows, those whose id is in `theirs` with its
    propositions; return the rows written. The teacher file is streamed."""

    def rows() -> Iterator[dict[str, Any]]:
        for _, row in numbered_jsonl(teacher, required=FIELDS):
            yield {**row, "propositions": theirs[row["id"]]} if row["id"] in theirs else row

    return write_jsonl(out, rows())


def distill_targets(teacher: Path, student: Path, out: Path) -> dict[str, int]:
    """Write `out`: `teacher`'s rows, those whose id is in `student` with the student's
    propositions; return the counts of rows written and replaced. A student id the teacher
    lacks is a located `DataError` and nothing is written."""
    theirs = read_student(student)
    check_known(student, theirs, file_ids(teacher), str(teacher))
    mine = {i: props for i, (_, props) in theirs.items()}
    return {"rows": merge(teacher, mine, out), "replaced": len(mine)}


def held_sources(held: Path) -> list[PairSource]:
    """The sources `heldout_split.py --with-train` split into `held` (its `split.json`); no
    split file or no training split is a `DataError` saying how to write them."""
    path = held / "split.json"
    if not path.is_file() or not (held / "train" / "passages.jsonl").is_file():
        raise DataError(held, None, None, f"no training split (write it: {HELD_HINT})")
    record = read_json(path)
    if not record.get("sources"):
        raise DataError(path, None, "sources", f"missing (write the split again: {HELD_HINT})")
    return [PairSource(**s) for s in record["sources"]]


def distill_held(held: Path, student: Path, out: Path) -> dict[str, dict[str, int]]:
    """Write `out/<name>/propositions.jsonl` for every source of `held` (`held_sources`): its
    teacher file with the student's propositions for its passages; return the counts of rows
    written and replaced per source. A student row outside `held/train` (the training
    articles) or in no teacher file is a located `DataError` and nothing is written."""
    sources, theirs = held_sources(held), read_student(student)
    train = held / "train" / "passages.jsonl"
    check_known(student, theirs, file_ids(train, ()), f"{train} (the training articles)")
    owned = {s.name: file_ids(Path(s.propositions)) & set(theirs) for s in sources}
    teachers = ", ".join(s.propositions for s in sources)
    check_known(student, theirs, set().union(*owned.values()), f"any teacher file ({teachers})")
    counts = {}
    for s in sources:
        mine = {i: theirs[i][1] for i in owned[s.name]}
        rows = merge(Path(s.propositions), mine, out / s.name / "propositions.jsonl")
        counts[s.name] = {"rows": rows, "replaced": len(mine)}
    return counts


def train_overrides(held: Path, out: Path) -> list[str]:
    """The train.py overrides that read the distilled files (`data.sources.<i>.propositions`,
    in the order of `held`'s sources, which are the experiment's)."""
    return [f"data.sources.{i}.propositions={out / s.name / 'propositions.jsonl'}"
            for i, s in enumerate(held_sources(held))]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    teachers = ap.add_mutually_exclusive_group(required=True)
    teachers.add_argument("--held", type=Path,
                          help="a heldout_split.py --with-train folder: every source's teacher file"
                          " (its split.json); --out is a folder, OUT/<source>/propositions.jsonl")  # fmt: skip
    teachers.add_argument("--teacher", type=Path,
                          help="one teacher propositions.jsonl; --out is the file")  # fmt: skip
    ap.add_argument("--student", type=Path, required=True, help="a model's propositions.jsonl")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.teacher:
        print(json.dumps(distill_targets(args.teacher, args.student, args.out)))
        return
    print(json.dumps(distill_held(args.held, args.student, args.out)))
    print("train.py " + " ".join(train_overrides(args.held, args.out)))


if __name__ == "__main__":
    main()
