"""Propositionizer inference speed on this machine: the copy student beside the other backbones.

Every spec generates for the same `--n` passages (`--passages`, default the first of the
shared squad-open corpus) through the pipeline's own loop (`utils.generation.generate_sorted`:
length-sorted batches of `--batch`, greedy unless a spec asks for beams), in one process, one spec after another, and
prints passages/s, generated tokens/s and what FactoidWiki's 41M passages would take at that
rate on this machine. Specs (`NAME[@BEAMS][:N]`: beam search of that width; N overriding
`--n` for that spec):

- `student`: the trained copy-aware export `--student DIR`, decoding as the held-out
  evaluation does (coverage penalty `--beta`, `--no-repeat-proposition`); its own output
  length.
- `bert2bert`: `model=minilm-bert2bert`'s architecture (MiniLM encoder, 3 decoder layers with
  cross-attention), as built before training;
- `tiny`: `model=tiny`'s T5 (the test model);
- `flan-t5-base`, `flan-t5-large`: the paper's backbones' shapes with random weights (no
  Flan-T5 weights reach these machines), fed MiniLM's wordpiece ids (T5's sentencepiece
  splits English into a similar number of tokens).

Untrained weights write arbitrary lengths, so every spec but `student` is made to generate
exactly the tokens its own output format needs for the teacher's propositions of the same
passages (`--propositions`; the JSON list through `backbone.target_ids` with that spec's
tokenizer), or, without teacher propositions, the student's measured length. Speed therefore
compares like with like: same passages, same outputs' lengths, one machine, one run.

    flock /tmp/densex-cpu.lock python benchmarks/propositionizer_speed.py --student RUN/hf_model \
        --passages HELD/passages.jsonl --propositions HELD/propositions.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoTokenizer

from densex.pipelines.plan.sizes import FACTOID_WIKI
from densex.propositionizer.backbone import (
    build_bert2bert,
    load_seq2seq,
    output_decoder,
    target_ids,
)
from densex.propositionizer.output import passage_source
from densex.propositionizer.pairs import format_target
from densex.utils.generation import eos_ids, generate_sorted
from densex.utils.io import read_jsonl
from densex.utils.logging import setup_logging
from densex.utils.models import resolve_model
from densex.utils.tiny_t5 import cached_tiny_t5

REPO = Path(__file__).resolve().parents[1]
FACTOIDWIKI_PASSAGES = FACTOID_WIKI["passage"][0]  # the planner's Table 1 count
# the published Flan-T5 configurations (google/flan-t5-base, google/flan-t5-large config.json)
T5_SHAPES = {
    "flan-t5-base": {"d_model": 768, "d_ff": 2048, "num_layers": 12, "num_heads": 12},
    "flan-t5-large": {"d_model": 1024, "d_ff": 2816, "num_layers": 24, "num_heads": 16},
}


def t5_shape(name: str, out: Path) -> Path:
    """A random-weight T5 of the published Flan-T5 shape `name` with MiniLM's tokenizer."""
    from transformers import T5Config, T5ForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(resolve_model("packaged:minilm"), model_max_length=512)
    config = T5Config(
        vocab_size=32128,
        d_kv=64,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        decoder_start_token_id=0,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.sep_token_id,
        **T5_SHAPES[name],
    )
    torch.manual_seed(0)
    T5ForConditionalGeneration(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def build(name: str, student: str | None, tmp: Path, texts: list[str]) -> Path:
    """The model directory of spec `name` (`tiny`'s vocabulary trained on `texts`)."""
    if name == "student":
        if not student:
            raise SystemExit("spec 'student' needs --student DIR (a train.py hf_model export)")
        return Path(student)
    if name == "bert2bert":
        return build_bert2bert(tmp / "b2b", decoder_layers=3, cross_attention_init="self")
    if name == "tiny":
        return cached_tiny_t5(
            tmp, texts, vocab_size=2000, d_model=64, num_layers=2, num_heads=4, d_ff=128
        )
    if name in T5_SHAPES:
        return t5_shape(name, tmp / name)
    raise SystemExit(f"unknown spec {name!r}: student, bert2bert, tiny, {', '.join(T5_SHAPES)}")


def run(
    model: Any,
    tok: Any,
    sources: Sequence[str],
    batch: int,
    length: int | None,
    rules: dict[str, Any],
    num_beams: int = 1,
) -> dict[str, float]:
    """Generate for `sources`: exactly `length` tokens each, or (None) until the model ends.
    Returns seconds, passages/s, generated tokens per passage and tokens/s."""
    generated = []
    eos, decode = eos_ids(model, tok), output_decoder(tok)

    def count(ids: torch.Tensor, batch_sources: Sequence[str]) -> list[str]:
        ended = torch.zeros_like(ids[:, 1:], dtype=torch.bool)  # column 0: the start token
        for token in eos:
            ended |= ids[:, 1:] == token
        # up to and with the first end token; the full width where none (forced, or cut)
        first = torch.where(ended.any(1), ended.int().argmax(1) + 1, ended.shape[1])
        generated.extend(first.tolist())
        return decode(ids, batch_sources) if decode else [""] * len(batch_sources)

    kwargs: dict[str, Any] = dict(rules)
    if length is not None:
        kwargs["min_new_tokens"] = length
    start = time.perf_counter()
    generate_sorted(
        model, tok, sources, batch, length or 512, num_beams, decode=count, generate_kwargs=kwargs
    )
    seconds = time.perf_counter() - start
    tokens = sum(generated)
    return {
        "seconds": seconds,
        "passages_per_s": len(sources) / seconds,
        "tokens_per_passage": tokens / len(sources),
        "tokens_per_s": tokens / seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="*", default=["student", "bert2bert", "tiny", "flan-t5-base:64"])
    ap.add_argument("--student", help="the trained copy student (train.py's RUN/hf_model)")
    ap.add_argument("--passages", help="passages JSONL (default: shared squad-open)")
    ap.add_argument("--propositions", help="teacher propositions JSONL of those passages")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--beta", type=float, default=2.0, help="the student's coverage penalty")
    ap.add_argument("--no-repeat-proposition", action="store_true", help="the student's rule")
    args = ap.parse_args()
    setup_logging()
    transformers.logging.set_verbosity_error()  # the untrained models' expected load reports
    torch.manual_seed(0)
    data = Path(os.environ.get("DENSEX_DATA_DIR", REPO.parent / "shared" / "data"))
    path = args.passages or data / "squad-open" / "passages.jsonl"
    passages = list(read_jsonl(path))
    teacher = {}
    if args.propositions:
        teacher = {r["id"]: r["propositions"] for r in read_jsonl(args.propositions)}
    specs = [(s.split(":")[0], int(s.split(":")[1]) if ":" in s else args.n) for s in args.specs]
    specs.sort(key=lambda s: not s[0].startswith("student"))  # its length is the fallback
    rows, student_length = [], None
    print(
        f"{'spec':<14} {'n':>4} {'tokens/passage':>14} {'passages/s':>10} {'tokens/s':>9} "
        f"{'41M passages (h)':>16}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for spec, n in specs:
            name, _, beams = spec.partition("@")
            chosen = passages[:n]
            sources = [passage_source(p) for p in chosen]
            targets = [format_target(teacher[p["id"]]) for p in chosen if p["id"] in teacher]
            out = build(name, args.student, Path(tmp), sources + targets)
            model = load_seq2seq(out).eval()  # first: it registers the copy student's config
            tok = AutoTokenizer.from_pretrained(out)
            tok.model_max_length = 512
            if name in T5_SHAPES:  # MiniLM's tokenizer also returns BERT's token_type_ids
                tok.model_input_names = ["input_ids", "attention_mask"]
            length = None
            if name != "student":
                if targets:
                    length = round(sum(map(len, target_ids(tok, targets))) / len(targets))
                elif student_length:
                    length = round(student_length)
                else:
                    raise SystemExit(f"{name}: give --propositions or measure 'student' first")
            rules = {"coverage_penalty": args.beta} if name == "student" and args.beta else {}
            if name == "student" and args.no_repeat_proposition:
                rules["no_repeat_proposition"] = True
            row = run(model, tok, sources, args.batch, length, rules, int(beams or 1))
            if name == "student" and student_length is None:
                student_length = row["tokens_per_passage"]
            hours = FACTOIDWIKI_PASSAGES / row["passages_per_s"] / 3600
            rows.append(
                {"spec": spec, "n": n, "forced_length": length, **row, "factoidwiki_h": hours}
            )
            print(
                f"{spec:<14} {n:>4} {row['tokens_per_passage']:>14.1f} "
                f"{row['passages_per_s']:>10.2f} {row['tokens_per_s']:>9.1f} {hours:>16,.0f}",
                flush=True,
            )
            del model
    print(json.dumps({"threads": torch.get_num_threads(), "batch": args.batch, "rows": rows}))


if __name__ == "__main__":
    main()
