"""Write the propositionizer's validation and test articles (and, asked, its training articles)
as corpora of their own.

`train.py experiment=propositionizer-copy-cpu` reads the teacher pairs of every source of
`data.sources` (`conf/data/squad-sources.yaml`: squad-open and squad-train's propositionized
articles) and splits each by article (`densex.propositionizer.sources.read_sources`: a fixed
SHA-1 hash b in [0, 1) of the title against the source's `test_fraction` and `val_fraction`).
Validation is squad-train's articles with b < 0.15 (22 articles, 1,086 passages, 3,947
questions); test is squad-open's with b < 0.1, the five held-out articles of every earlier run
(268 passages, 967 questions). The protocol: every choice (checkpoint, decoding rule,
thresholds) is made on the validation articles; the test articles are read once per reported
model. This script writes, for each split, `passages.jsonl`, `propositions.jsonl` (the
teacher's), `questions.jsonl` (their SQuAD questions) and `short_questions.jsonl` (those whose
shortest answer has at most 5 words: answer recall within l words is judged on them) under
`OUT/validation/` and `OUT/test/` (and `OUT/train/` with `--with-train`), and `split.json` with
the titles and counts per split and source:

    python scripts/heldout_split.py --out HELD      # HELD/validation, HELD/test
    python scripts/heldout_split.py --out HELD --with-train   # and HELD/train
    S=HELD/validation   # every choice; S=HELD/test once per reported model
    python evaluate.py corpus=squad-open corpus.passages=$S/passages.jsonl \
        corpus.propositions=null propositionizer=model propositionizer.model=<run>/hf_model \
        granularity=proposition dataset.path=$S/questions.jsonl retriever=minilm
    # answer recall within 100 words on the short-answer questions:
    python evaluate.py ... dataset.path=$S/short_questions.jsonl

The sources and their fractions are the experiment's (`--data-dir` replaces
`${paths.data_dir}` in them), so the corpora are exactly the articles train.py splits off.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from densex.pipelines.train.sources import config_sources
from densex.propositionizer.sources import PairSource, read_sources, source_questions
from densex.utils.io import numbered_jsonl, write_jsonl

SOURCES = Path(__file__).parents[1] / "conf/data/squad-sources.yaml"
QUESTION_FIELDS = ("id", "question", "answers")


def split_rows(source: PairSource, ids: set[str]) -> dict[str, list[dict]]:
    """The passages `ids` of `source` (rows as the source spells them, streamed), their
    teacher propositions, their articles' questions and the short-answer ones among them."""
    passages = [r for _, r in numbered_jsonl(source.passages) if r["id"] in ids]
    props = [r for _, r in numbered_jsonl(source.propositions) if r["id"] in ids]
    questions = source_questions([source], {p["title"] for p in passages}) if passages else []
    short = [q for q in questions if q["short"]]
    plain = [{k: q[k] for k in QUESTION_FIELDS} for q in questions]
    short = [{k: q[k] for k in QUESTION_FIELDS} for q in short]
    return {"passages": passages, "propositions": props, "questions": plain,
            "short_questions": short}  # fmt: skip


def counts_of(rows: dict[str, list[dict]]) -> dict[str, int]:
    """Articles, passages, propositions, questions and short-answer questions of `rows`."""
    return {
        "articles": len({p["title"] for p in rows["passages"]}),
        "passages": len(rows["passages"]),
        "propositions": sum(len(r["propositions"]) for r in rows["propositions"]),
        "questions": len(rows["questions"]),
        "short-answer": len(rows["short_questions"]),
    }


def write_split(
    sources: Sequence[PairSource], out: Path, ids: set[str]
) -> dict[str, dict[str, int]]:
    """Write the passages `ids` of every source, their teacher propositions and questions to
    `out` (one corpus, sources in order); the counts of all (`all`) and of each source."""
    per = {s.name: split_rows(s, ids) for s in sources}
    for name in ("passages", "propositions", "questions", "short_questions"):
        write_jsonl(out / f"{name}.jsonl", (r for rows in per.values() for r in rows[name]))
    merged = {k: [r for rows in per.values() for r in rows[k]] for k in next(iter(per.values()))}
    return {"all": counts_of(merged), **{n: counts_of(rows) for n, rows in per.items()}}


def heldout_split(
    sources: Sequence[PairSource], out: Path, with_train: bool = False
) -> dict[str, dict[str, dict[str, int]]]:
    """Write the validation and test articles of `sources` under `out/validation` and
    `out/test` (and, with `with_train`, the training articles under `out/train`: e.g. to
    propositionize them for `scripts/distill_targets.py`); return the counts per split, of
    all sources (`all`) and of each by name (also in `out/split.json`, with the titles)."""
    splits = read_sources(sources)
    parts = [("validation", splits.validation), ("test", splits.test)]
    parts += [("train", splits.train)] if with_train else []
    counts, titles = {}, {}
    for name, pairs in parts:
        counts[name] = write_split(sources, out / name, {p["id"] for p in pairs})
        titles[name] = sorted({p["title"] for p in pairs})
    record = {"sources": [asdict(s) for s in sources], "counts": counts, "titles": titles}
    (out / "split.json").write_text(json.dumps(record, indent=2, ensure_ascii=False))
    return counts


def main() -> None:
    default = Path(os.environ.get("DENSEX_DATA_DIR", Path(__file__).parents[2] / "shared/data"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=default, help="paths.data_dir")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--config", type=Path, default=SOURCES, help="a data config with sources")
    ap.add_argument("--with-train", action="store_true", help="also write OUT/train")
    args = ap.parse_args()
    counts = heldout_split(config_sources(args.config, args.data_dir), args.out, args.with_train)
    print(json.dumps({name: c["all"] for name, c in counts.items()}))


if __name__ == "__main__":
    main()
