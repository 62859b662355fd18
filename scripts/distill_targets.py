"""Training targets for sequence-level distillation of a propositionizer (Kim and Rush, 2016).

Writes a propositions file that is the teacher's (`--teacher`, e.g. the shared squad-open
`propositions.jsonl`) except for the passages a model propositionized (`--student`, the
`propositions.jsonl` the pipeline wrote into its cache for those passages): those rows carry
the model's propositions. `train.py data.propositions=OUT` then trains on the model's outputs
for the training articles while the validation and test articles keep the teacher's. Rows stay
in the teacher file's order; a student row whose id the teacher file lacks is an error naming
the file and line (the two files must describe the same corpus):

    python scripts/heldout_split.py --out HELD --with-train          # HELD/train/passages.jsonl
    python index.py stage=units corpus.passages=HELD/train/passages.jsonl corpus.propositions=null \
        propositionizer=model propositionizer.model=RUN/hf_model ...  # the decoding to distil
    python scripts/distill_targets.py --teacher ../shared/data/squad-open/propositions.jsonl \
        --student CACHE/propositions/model/<key>/propositions.jsonl --out DISTILL/propositions.jsonl

docs/propositionizer.md ("Trained on its own beam outputs") has the whole recipe.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from densex.utils.io import DataError, numbered_jsonl, write_jsonl


def distill_targets(teacher: Path, student: Path, out: Path) -> dict[str, int]:
    """Write `out` (atomically): `teacher`'s rows, those whose id is in `student` with the
    student's propositions; return the counts of rows written and replaced. The teacher file
    is streamed; only the student's rows are held in memory."""
    fields = ("id", "propositions")
    theirs = {}
    for line, row in numbered_jsonl(student, required=fields):
        theirs[row["id"]] = (line, row["propositions"])
    unseen = set(theirs)

    def rows():
        for _, row in numbered_jsonl(teacher, required=fields):
            if row["id"] in theirs:
                unseen.discard(row["id"])
                row = {**row, "propositions": theirs[row["id"]][1]}
            yield row
        if unseen:  # raised inside the write: `out` is not written
            first = min(unseen, key=lambda i: theirs[i][0])
            raise DataError(student, theirs[first][0], "id", f"{first!r} is not in {teacher}")

    return {"rows": write_jsonl(out, rows()), "replaced": len(theirs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", type=Path, required=True, help="the teacher's propositions.jsonl")
    ap.add_argument("--student", type=Path, required=True, help="a model's propositions.jsonl")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    print(json.dumps(distill_targets(args.teacher, args.student, args.out)))


if __name__ == "__main__":
    main()
