"""Build the copy student's vocabulary shortlist from the copy experiment's training articles.

The shortlist (`densex.propositionizer.shortlist`) lists the word pieces that the teacher's
propositions add to their per-sentence inputs (title and sentence, no context: the strictest
input, so it serves every context window) on the *training* articles of the copy experiment's
split (its `data.sources`, `conf/data/squad-sources.yaml`: squad-open's and squad-train's,
split as train.py splits them); decoding adds each batch's own source tokens. Use it with
`propositionizer.shortlist=FILE`:

    python scripts/copy_shortlist.py --model RUN/hf_model --out RUN/shortlist.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from transformers import AutoTokenizer

import densex.propositionizer.copy_lm  # noqa: F401 - registers the student's config for AutoTokenizer
from densex.pipelines.train.sources import config_sources
from densex.propositionizer.resolve import SentenceSplitter
from densex.propositionizer.sentence_pairs import sentence_pairs
from densex.propositionizer.shortlist import build_shortlist, save_shortlist
from densex.propositionizer.sources import read_sources

SOURCES = Path(__file__).parents[1] / "conf/data/squad-sources.yaml"


def main() -> None:
    default = Path(os.environ.get("DENSEX_DATA_DIR", Path(__file__).parents[2] / "shared/data"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the student's export (its tokenizer)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data-dir", type=Path, default=default, help="paths.data_dir")
    ap.add_argument("--config", type=Path, default=SOURCES, help="a data config with sources")
    ap.add_argument("--spacy-model", default="en_core_web_lg")
    args = ap.parse_args()
    train = read_sources(config_sources(args.config, args.data_dir)).train
    units = sentence_pairs(train, SentenceSplitter(args.spacy_model).many, 0)
    tok = AutoTokenizer.from_pretrained(args.model)
    tok.model_max_length = 1 << 20  # counting tokens only: no model reads these
    shortlist = build_shortlist(tok, ((u["source"], u["target"]) for u in units))
    save_shortlist(shortlist, args.out)
    print(json.dumps({"out": str(args.out), "ids": len(shortlist["ids"]), "pairs": len(units)}))


if __name__ == "__main__":
    main()
