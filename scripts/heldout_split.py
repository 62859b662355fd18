"""Write the propositionizer's held-out articles of squad-open as a corpus of their own.

`train.py` splits the squad-open pairs by article (`densex.propositionizer.pairs.split_by_title`,
a fixed hash of the title; `data.val_fraction`, default 0.1). This script writes, for exactly
those held-out articles, `passages.jsonl`, `propositions.jsonl` (the teacher's) and
`questions.jsonl` (their SQuAD questions), so retrieval with a trained model's own
propositions can be measured on passages the model never saw:

    python scripts/heldout_split.py --out heldout
    python evaluate.py corpus=squad-open corpus.passages=heldout/passages.jsonl \
        corpus.propositions=null propositionizer=model propositionizer.model=<run>/hf_model \
        granularity=proposition dataset.path=heldout/questions.jsonl retriever=minilm
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from densex.propositionizer.pairs import split_by_title
from densex.utils.io import numbered_jsonl, read_json, write_jsonl


def heldout_split(data_dir: Path, out: Path, val_fraction: float = 0.1) -> dict[str, int]:
    """Write the held-out articles' passages, teacher propositions and questions to `out`;
    return the counts."""
    passages = [row for _, row in numbered_jsonl(data_dir / "passages.jsonl")]
    _, held = split_by_title(passages, val_fraction)
    titles = {p["title"] for p in held}
    ids = {p["id"] for p in held}
    squad = read_json(data_dir / "squad-dev-v1.1.json")
    qids = {
        qa["id"]
        for article in squad["data"]
        if article["title"].replace("_", " ") in titles
        for para in article["paragraphs"]
        for qa in para["qas"]
    }
    props = [r for _, r in numbered_jsonl(data_dir / "propositions.jsonl") if r["id"] in ids]
    questions = [r for _, r in numbered_jsonl(data_dir / "questions.jsonl") if r["id"] in qids]
    write_jsonl(out / "passages.jsonl", held)
    write_jsonl(out / "propositions.jsonl", props)
    write_jsonl(out / "questions.jsonl", questions)
    counts = {
        "articles": len(titles),
        "passages": len(held),
        "propositions": sum(len(r["propositions"]) for r in props),
        "questions": len(questions),
    }
    (out / "split.json").write_text(
        json.dumps({"val_fraction": val_fraction, "titles": sorted(titles), **counts}, indent=2)
    )
    return counts


def main() -> None:
    default = Path(os.environ.get("DENSEX_DATA_DIR", Path(__file__).parents[2] / "shared/data"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=default / "squad-open")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--val-fraction", type=float, default=0.1)
    args = ap.parse_args()
    print(json.dumps(heldout_split(args.data_dir, args.out, args.val_fraction)))


if __name__ == "__main__":
    main()
