"""Write the propositionizer's validation and test articles of squad-open as corpora of their own.

`train.py` splits the squad-open pairs by article (`densex.propositionizer.pairs.split_articles`:
a fixed SHA-1 hash b in [0, 1) of the title; b < `data.test_fraction` (0.1) is test,
the next `data.val_fraction` is validation, the rest trains). The protocol: every choice
(checkpoint, decoding rule, context window, thresholds) is made on the validation articles;
the test articles are read once per reported model. This script writes, for each of the two
splits, `passages.jsonl`, `propositions.jsonl` (the teacher's) and `questions.jsonl` (their
SQuAD questions) under `OUT/validation/` and `OUT/test/`, and `split.json` with the titles
and counts:

    python scripts/heldout_split.py --out HELD      # HELD/validation, HELD/test
    python scripts/heldout_split.py --out HELD --with-train   # and HELD/train
    python evaluate.py corpus=squad-open corpus.passages=HELD/test/passages.jsonl \
        corpus.propositions=null propositionizer=model propositionizer.model=<run>/hf_model \
        granularity=proposition dataset.path=HELD/test/questions.jsonl retriever=minilm

The default fractions are the copy student's experiment's
(`conf/experiment/propositionizer-copy-cpu.yaml`: validation 4 articles, 245 passages); the test
articles are the five held-out articles of earlier runs (268 passages, 967 questions) at any
validation fraction, so figures stay comparable.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from omegaconf import OmegaConf

from densex.data.squad_articles import article_questions
from densex.propositionizer.pairs import split_articles
from densex.utils.io import numbered_jsonl, write_jsonl


def write_split(data_dir: Path, out: Path, passages: list[dict]) -> dict[str, int]:
    """Write one split's passages, teacher propositions and questions to `out`; the counts."""
    titles = {p["title"] for p in passages}
    ids = {p["id"] for p in passages}
    props = [r for _, r in numbered_jsonl(data_dir / "propositions.jsonl") if r["id"] in ids]
    questions = article_questions(
        data_dir / "squad-dev-v1.1.json", data_dir / "questions.jsonl", titles
    )
    write_jsonl(out / "passages.jsonl", passages)
    write_jsonl(out / "propositions.jsonl", props)
    write_jsonl(out / "questions.jsonl", questions)
    return {
        "articles": len(titles),
        "passages": len(passages),
        "propositions": sum(len(r["propositions"]) for r in props),
        "questions": len(questions),
    }


def heldout_split(
    data_dir: Path,
    out: Path,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    with_train: bool = False,
) -> dict[str, dict[str, int]]:
    """Write the validation and test articles under `out/validation` and `out/test` (and, with
    `with_train`, the training articles under `out/train`: e.g. to propositionize them for
    `scripts/distill_targets.py`); return the counts per split (also in `out/split.json`, with
    the titles)."""
    passages = [row for _, row in numbered_jsonl(data_dir / "passages.jsonl")]
    train, val, test = split_articles(passages, val_fraction, test_fraction)
    counts, titles = {}, {}
    splits = [("validation", val), ("test", test)] + ([("train", train)] if with_train else [])
    for name, rows in splits:
        counts[name] = write_split(data_dir, out / name, rows)
        titles[name] = sorted({p["title"] for p in rows})
    record = {"val_fraction": val_fraction, "test_fraction": test_fraction, "counts": counts}
    (out / "split.json").write_text(json.dumps({**record, "titles": titles}, indent=2))
    return counts


EXPERIMENT = Path(__file__).parents[1] / "conf/experiment/propositionizer-copy-cpu.yaml"


def main() -> None:
    default = Path(os.environ.get("DENSEX_DATA_DIR", Path(__file__).parents[2] / "shared/data"))
    val_fraction = float(OmegaConf.load(EXPERIMENT).data.val_fraction)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=default / "squad-open")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--val-fraction",
        type=float,
        default=val_fraction,
        help=f"data.val_fraction ({EXPERIMENT.name})",
    )
    ap.add_argument("--test-fraction", type=float, default=0.1, help="data.test_fraction")
    ap.add_argument("--with-train", action="store_true", help="also write OUT/train")
    args = ap.parse_args()
    counts = heldout_split(
        args.data_dir, args.out, args.val_fraction, args.test_fraction, args.with_train
    )
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
