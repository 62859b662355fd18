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
        --passages HELD/test/passages.jsonl --propositions HELD/test/propositions.jsonl student bert2bert

Without specs (the default) it compares side by side, in one run (`compare`; under 10 minutes
on 2 cores, `--quick` about one): the student per sentence (`--context` earlier sentences as
context, coverage penalty `--beta`) by today's paths (beam 4 and plain greedy, every row
computed to the end) and the cheaper ones (`copy_decode.py`: finished rows dropped, copy-span
lookahead of 2 and 8 tokens, bf16 where the CPU has it, a vocabulary shortlist `--shortlist`),
with each one's identical-output rate
against its exact reference; then the Flan-T5-base and -large shapes through transformers fp32
and CTranslate2 int8 (same forced lengths, tokens/s); FactoidWiki hours for each on one such
machine and on a 100-node array; the rates go to `--record` (read by `index.py stage=plan`). Its last lines:

    student: best / beam 4 = R.RRx (P.PP passages/s)
    flan-t5-large shape: ctranslate2 int8 / transformers = R.RRx
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
from densex.utils.generation import generate_sorted
from densex.utils.io import read_jsonl
from densex.utils.logging import setup_logging
from densex.utils.models import resolve_model
from densex.utils.tiny_t5 import cached_tiny_t5

REPO = Path(__file__).resolve().parents[1]
FACTOIDWIKI_PASSAGES = FACTOID_WIKI["passage"][0]  # the planner's Table 1 count
RECORD_NAME = "propositionizer_speed.json"  # plan/machine.py reads it
# the published Flan-T5 configurations (google/flan-t5-base, google/flan-t5-large config.json)
T5_SHAPES = {
    "flan-t5-base": {"d_model": 768, "d_ff": 2048, "num_layers": 12, "num_heads": 12},
    "flan-t5-large": {"d_model": 1024, "d_ff": 2816, "num_layers": 24, "num_heads": 16},
}


def t5_shape(name: str, out: Path) -> Path:
    """A random-weight T5 of the published Flan-T5 shape `name` with MiniLM's tokenizer."""
    from transformers import T5Config, T5ForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(resolve_model("packaged:minilm"), model_max_length=512)
    tok.eos_token = tok.sep_token  # CTranslate2's converter reads the end token by name
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
    """Generate for `sources` (`timed`, the outputs also decoded to text, as the pipeline does):
    exactly `length` tokens each, or (None) until the model ends. Returns seconds, passages/s,
    generated tokens per passage and tokens/s."""
    row, _ = timed(model, tok, sources, batch, rules, num_beams, length, output_decoder(tok))
    return {
        "seconds": row["seconds"],
        "passages_per_s": len(sources) / row["seconds"],
        "tokens_per_passage": row["tokens"] / len(sources),
        "tokens_per_s": row["tokens_per_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="*", help="NAME[@BEAMS][:N]; none: the side-by-side compare")
    ap.add_argument("--student", help="the trained copy student (train.py's RUN/hf_model)")
    ap.add_argument("--passages", help="passages JSONL (default: shared squad-open)")
    ap.add_argument("--propositions", help="teacher propositions JSONL of those passages")
    ap.add_argument("--n", type=int, default=256, help="specs: passages per spec")
    ap.add_argument("--compare-n", type=int, default=36, help="compare: the student's passages")
    ap.add_argument("--context", type=int, default=0, help="compare: context sentences")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--beta", type=float, default=1.0, help="the student's coverage penalty")
    ap.add_argument("--no-repeat-proposition", action="store_true", help="the student's rule")
    ap.add_argument("--end-penalty", type=float, default=None, help="the student's rule")
    ap.add_argument("--context-penalty", type=float, default=None, help="the student's rule")
    ap.add_argument("--shortlist", help="compare: also the student with this shortlist file")
    ap.add_argument("--cores", action="store_true", help="1 process x 2 threads vs 2 x 1")
    ap.add_argument("--gpu", action="store_true", help="flan-t5-large on CUDA: bf16 torch vs ct2")
    ap.add_argument("--quick", action="store_true", help="compare: a few inputs (a minute)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    ap.add_argument("--record", default=str(REPO / ".cache" / "benchmarks" / RECORD_NAME))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cores:
        setup_logging()
        transformers.logging.set_verbosity_error()
        return both_cores(args)
    if args.gpu:
        setup_logging()
        transformers.logging.set_verbosity_error()
        return gpu_large(args)
    if not args.specs:
        setup_logging()
        transformers.logging.set_verbosity_error()
        return compare(args)
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


# ---- compare: the side-by-side run (module docstring) ---------------------------------------
STUDENT_PATHS = (  # name, generate kwargs, beams, the path it must equal (exact steps)
    ("beam 4 (today)", {"drop_finished": False}, 4, None),
    ("beam 4, rows dropped", {}, 4, "beam 4 (today)"),
    ("greedy (today)", {"lookahead": 0, "drop_finished": False}, 1, None),
    ("greedy, rows dropped", {"lookahead": 0}, 1, "greedy (today)"),
    ("greedy, lookahead 2", {"lookahead": 2}, 1, "greedy (today)"),
    ("greedy, lookahead 8", {"lookahead": 8}, 1, "greedy (today)"),
)


def timed(model, tok, sources, batch, kwargs, beams, length=None, decode=None) -> tuple[dict, list]:
    """Generate for `sources` (`generate_sorted`, as the pipeline; `decode(ids, sources)` run on
    each batch's output when given, timed with it): the rate and each output's ids (batch
    order; trailing padding cut; a row's tokens are those up to and with its end token, or
    exactly `length` when forced)."""
    ids: list[list[int]] = []
    pad = getattr(getattr(model, "generation_config", None), "pad_token_id", 0) or 0

    def keep(out, batch_sources):
        for row in out.tolist():
            while len(row) > 1 and row[-1] == pad:
                row.pop()
            ids.append(row)
        return decode(out, batch_sources) if decode else [""] * len(batch_sources)

    kw = dict(kwargs)
    if length is not None:
        kw["min_new_tokens"] = length
    start = time.perf_counter()
    generate_sorted(
        model, tok, sources, batch, length or 512, beams, decode=keep, generate_kwargs=kw
    )
    seconds = time.perf_counter() - start
    # forced: exactly `length` each (a random model may write the padding id, which the
    # trailing-padding cut above would not count)
    tokens = len(ids) * length if length is not None else sum(len(r) - 1 for r in ids)
    return {
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "n": len(sources),
    }, ids


def hours(passages_per_s: float) -> str:
    one = FACTOIDWIKI_PASSAGES / passages_per_s / 3600
    return f"{one:>10,.0f} h {one / 100:>8,.1f} h"


def student_inputs(passages: list[dict], context: int) -> tuple[list[str], int]:
    """The per-sentence model inputs of `passages` as the pipeline builds them."""
    from densex.propositionizer.resolve import SentenceSplitter
    from densex.propositionizer.sentence_inputs import sentence_units

    split = SentenceSplitter("en_core_web_lg")
    units, _ = sentence_units(passages, split.many, context)
    return [passage_source(u) for u in units], len(passages)


def compare_student(args, passages, tmp: Path) -> dict:
    """The student's paths side by side (`STUDENT_PATHS`, + bf16 where the CPU has it)."""
    from densex.propositionizer.copy_build import cached_copy_lm
    from densex.propositionizer.fingerprint import cpu_has_bf16

    student = args.student or cached_copy_lm(tmp, encoder="packaged:minilm")
    if not args.student:
        print("(no --student: an untrained copy LM, which copies: speed only)")
    sources, n = student_inputs(passages, args.context)
    model = load_seq2seq(student).eval()
    tok = AutoTokenizer.from_pretrained(student)
    rules = {"coverage_penalty": args.beta} if args.beta else {}
    if args.no_repeat_proposition:
        rules["no_repeat_proposition"] = True
    if args.end_penalty:
        from densex.propositionizer.content_pieces import content_vocab

        rules |= {"end_penalty": args.end_penalty, "content_vocab": content_vocab(tok)}
    if args.context_penalty:
        rules["context_penalty"] = args.context_penalty
    paths = list(STUDENT_PATHS)
    if cpu_has_bf16():
        paths.append(("greedy, rows dropped, bf16", {"dtype": torch.bfloat16}, 1, "greedy (today)"))
    if args.shortlist:  # approximate: identical-output rates say how much
        from densex.propositionizer.shortlist import load_shortlist

        short = {"shortlist": load_shortlist(args.shortlist, model.config.vocab_size)}
        paths.append(("beam 4, shortlist", short, 4, "beam 4 (today)"))
        paths.append(("greedy, shortlist", {"lookahead": 0, **short}, 1, "greedy (today)"))
    print(f"student {student}: {n} passages, {len(sources)} sentence inputs, batch {args.batch}")
    print(
        f"{'path':<26} {'passages/s':>10} {'tokens/s':>9} {'identical':>9} {'41M: 1 machine':>14} {'100 nodes':>10}"
    )
    out, ids = {}, {}
    for name, kwargs, beams, reference in paths:
        kw = {**rules, **kwargs}
        dtype = kw.pop("dtype", torch.float32)
        model.to(dtype)
        row, ids[name] = timed(model, tok, sources, args.batch, kw, beams)
        row["passages_per_s"] = n / row["seconds"]
        same = "-" if reference is None else f"{_identical(ids[name], ids[reference]):.1%}"
        row["identical_to"], row["identical"] = reference, same
        out[name] = row
        print(
            f"{name:<26} {row['passages_per_s']:>10.2f} {row['tokens_per_s']:>9.1f} {same:>9} {hours(row['passages_per_s'])}",
            flush=True,
        )
    model.to(torch.float32)
    return out


def _identical(a: list, b: list) -> float:
    return sum(x == y for x, y in zip(a, b)) / max(1, len(a))


def compare_t5(args, passages, teacher, tmp: Path) -> dict:
    """transformers fp32 vs CTranslate2 int8 on the Flan-T5 shapes (forced lengths)."""
    from transformers import GenerationConfig

    from densex.propositionizer.ct2 import CT2Seq2Seq, converted_model

    counts = {"flan-t5-base": 2 if args.quick else 16, "flan-t5-large": 1 if args.quick else 8}
    out = {}
    for name, n in counts.items():
        chosen = passages[:n]
        sources = [passage_source(p) for p in chosen]
        path = t5_shape(name, tmp / name)
        tok = AutoTokenizer.from_pretrained(path)
        tok.model_max_length = 512
        tok.model_input_names = ["input_ids", "attention_mask"]
        targets = [format_target(teacher[p["id"]]) for p in chosen if p["id"] in teacher]
        length = round(sum(map(len, target_ids(tok, targets))) / len(targets)) if targets else 64
        if args.quick:
            length = min(length, 32)
        hf = load_seq2seq(path).eval()
        row_hf, _ = timed(hf, tok, sources, args.batch, {}, 1, length)
        del hf
        ct2 = CT2Seq2Seq(
            converted_model(str(path), tmp / "ct2", "int8"),
            tok,
            GenerationConfig.from_pretrained(path),
            compute="int8",
        )
        row_ct2, _ = timed(ct2, tok, sources, args.batch, {}, 1, length)
        del ct2
        for runtime, row in (("transformers fp32", row_hf), ("ctranslate2 int8", row_ct2)):
            row["passages_per_s"] = n / row["seconds"]
            print(
                f"{name + ' ' + runtime:<36} {row['passages_per_s']:>8.3f} {row['tokens_per_s']:>9.1f} {hours(row['passages_per_s'])}",
                flush=True,
            )
        out[name] = {"length": length, "transformers": row_hf, "ctranslate2_int8": row_ct2}
        shutil.rmtree(path, ignore_errors=True)
    return out


def _student_share(
    student: str, sources: list[str], threads: int, batch: int, beta: float
) -> float:
    """Seconds one process with `threads` torch threads takes to generate for `sources` (the
    best greedy path: rows dropped, one token a step), the model loaded first (not timed)."""
    torch.set_num_threads(threads)
    model = load_seq2seq(student).eval()
    tok = AutoTokenizer.from_pretrained(student)
    rules = {"coverage_penalty": beta} if beta else {}
    return timed(model, tok, sources, batch, rules, 1)[0]["seconds"]


def both_cores(args) -> None:
    """Generation on one machine as 1 process x 2 threads vs 2 processes x 1 thread (each half
    of the inputs, as two processes sharing the shard claims split them); run on quiet cores."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from densex.propositionizer.copy_build import cached_copy_lm

    data = Path(os.environ.get("DENSEX_DATA_DIR", REPO.parent / "shared" / "data"))
    passages = list(read_jsonl(args.passages or data / "squad-open" / "passages.jsonl"))
    sources, n = student_inputs(passages[: args.compare_n], args.context)
    with tempfile.TemporaryDirectory() as tmp:
        student = args.student or cached_copy_lm(tmp, encoder="packaged:minilm")
        one = _student_share(student, sources, 2, args.batch, args.beta)
        halves = [sources[0::2], sources[1::2]]
        with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
            jobs = [
                pool.submit(_student_share, student, h, 1, args.batch, args.beta) for h in halves
            ]
            two = max(j.result() for j in jobs)
    print(f"1 process x 2 threads: {n / one:.2f} passages/s ({len(sources)} inputs, {one:.1f} s)")
    print(f"2 processes x 1 thread: {n / two:.2f} passages/s (the slower half {two:.1f} s)")
    print(f"both cores: 2 processes / 1 process = {one / two:.2f}x")


def gpu_large(args) -> None:
    """The Flan-T5-large shape on the GPU (benchmarks/gpu.sh): transformers bf16 vs
    CTranslate2 bf16, `--batch` (64+) inputs of the shared passages, the teacher's lengths."""
    from transformers import GenerationConfig

    from densex.propositionizer.ct2 import CT2Seq2Seq, converted_model

    data = Path(os.environ.get("DENSEX_DATA_DIR", REPO.parent / "shared" / "data"))
    passages = list(read_jsonl(data / "squad-open" / "passages.jsonl"))[: 2 * args.batch]
    teacher = {
        r["id"]: r["propositions"] for r in read_jsonl(data / "squad-open" / "propositions.jsonl")
    }
    sources = [passage_source(p) for p in passages]
    with tempfile.TemporaryDirectory() as tmp:
        path = t5_shape("flan-t5-large", Path(tmp) / "large")
        tok = AutoTokenizer.from_pretrained(path)
        tok.model_max_length, tok.model_input_names = 512, ["input_ids", "attention_mask"]
        targets = [format_target(teacher[p["id"]]) for p in passages if p["id"] in teacher]
        length = round(sum(map(len, target_ids(tok, targets))) / max(1, len(targets))) or 64
        hf = load_seq2seq(path, dtype=torch.bfloat16).to("cuda").eval()
        timed(hf, tok, sources[:8], 8, {}, 1, 8)  # warm-up
        rows = {"transformers bf16": timed(hf, tok, sources, args.batch, {}, 1, length)[0]}
        del hf
        torch.cuda.empty_cache()
        ct2_dir = converted_model(str(path), Path(tmp) / "ct2", "bfloat16")
        ct2 = CT2Seq2Seq(ct2_dir, tok, GenerationConfig.from_pretrained(path), "bfloat16", "cuda")
        rows["ctranslate2 bf16"] = timed(ct2, tok, sources, args.batch, {}, 1, length)[0]
    name = torch.cuda.get_device_name(0)
    for runtime, row in rows.items():
        rate = row["n"] / row["seconds"]
        gpu_h = FACTOIDWIKI_PASSAGES / rate / 3600
        print(
            f"gpu {name}: flan-t5-large {runtime}, batch {args.batch}, {length} tokens: {row['tokens_per_s']:,.0f} tokens/s, {rate:,.1f} passages/s; FactoidWiki {gpu_h:,.0f} GPU-hours"
        )
    ratio = rows["ctranslate2 bf16"]["tokens_per_s"] / rows["transformers bf16"]["tokens_per_s"]
    print(f"gpu flan-t5-large: ctranslate2 bf16 / transformers bf16 = {ratio:.2f}x")


def compare(args) -> None:
    """The side-by-side run (module docstring); its last two lines are the ratios."""
    data = Path(os.environ.get("DENSEX_DATA_DIR", REPO.parent / "shared" / "data"))
    passages = list(read_jsonl(args.passages or data / "squad-open" / "passages.jsonl"))
    props = args.propositions or data / "squad-open" / "propositions.jsonl"
    teacher = (
        {r["id"]: r["propositions"] for r in read_jsonl(props)} if Path(props).exists() else {}
    )
    n = 4 if args.quick else args.compare_n
    print(f"torch threads {torch.get_num_threads()}; FactoidWiki {FACTOIDWIKI_PASSAGES:,} passages")
    with tempfile.TemporaryDirectory() as tmp:
        student = compare_student(args, passages[:n], Path(tmp))
        print(
            f"{'shape runtime':<36} {'passages/s':>8} {'tokens/s':>9} {'41M: 1 machine':>14} {'100 nodes':>10}"
        )
        t5 = compare_t5(args, passages, teacher, Path(tmp))
    best_name, best = max(student.items(), key=lambda kv: kv[1]["passages_per_s"])
    beam = student["beam 4 (today)"]
    large = t5["flan-t5-large"]
    record = {
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "student": student,
        "t5": t5,
        "best": {"path": best_name, "passages_per_s": best["passages_per_s"]},
        "time": time.time(),
    }
    Path(args.record).parent.mkdir(parents=True, exist_ok=True)
    Path(args.record).write_text(json.dumps(record, indent=1))
    print(
        f"best student path: {best_name}; greedy (today) {student['greedy (today)']['passages_per_s']:.2f} passages/s; record {args.record}"
    )
    print(
        f"student: best / beam 4 = {best['passages_per_s'] / beam['passages_per_s']:.2f}x ({best['passages_per_s']:.2f} passages/s)"
    )
    ratio = large["ctranslate2_int8"]["tokens_per_s"] / large["transformers"]["tokens_per_s"]
    print(f"flan-t5-large shape: ctranslate2 int8 / transformers = {ratio:.2f}x")


if __name__ == "__main__":
    main()
