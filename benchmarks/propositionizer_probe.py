"""Short training probes that decide a student propositionizer's design, side by side.

Every spec trains `--steps` AdamW steps of `--batch` squad-open pairs from the training
articles (the article-level split of `data.val_fraction` 0.1, the same seeded order for every
spec) and is then measured on 32 passages of the held-out articles:

- `held-out`: the token loss of their teacher targets;
- `swap gap`: that loss with every passage's source replaced by another held-out passage's,
  minus the true loss (near 0: the model ignores its source and learnt a language model);
- with `--generate`: greedy outputs (`utils.generation.generate_sorted`, as the pipeline, in
  one batch of `--gen-batch` 32), their parse rate, unsupported content words (in neither
  passage nor title), coverage of the passage's content words (`densex.metrics.propositions`),
  output words per passage, passages per second and what FactoidWiki's 41M passages would
  take at that rate on this machine (hours).

Specs: `copy@LR[@bf16]` (the copy-aware prefix LM, `model=minilm-copy`; fp32 unless bf16
autocast is asked for), `prefix@LR[@bf16]` (the same prefix LM without its copy head) and the MiniLM bert2bert baseline `LR@LAYERS[@fp32|bf16[@random|self]]`
(decoder layers, dtype, cross-attention init; with the 0.5 decoder-input dropout of
`model=minilm-bert2bert`), and `tiny@LR` (conf/model/tiny's T5). Run under the shared CPU lock:

    flock /tmp/densex-cpu.lock python benchmarks/propositionizer_probe.py --steps 60 \
        --batch 16 --generate copy@1e-4 prefix@1e-4 3e-4@3@fp32@self
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from densex.metrics.propositions import coverage, unsupported
from densex.pipelines.plan.sizes import FACTOID_WIKI
from densex.propositionizer.backbone import (
    build_bert2bert,
    corrupt_decoder_inputs,
    load_seq2seq,
    output_decoder,
    target_ids,
    token_nll,
)
from densex.propositionizer.copy_build import build_copy_lm
from densex.propositionizer.pairs import load_squad_open_pairs, split_by_title
from densex.propositionizer.parse import parse_propositions
from densex.utils.generation import generate_sorted
from densex.utils.tiny_t5 import cached_tiny_t5


def batch(tok, pairs, max_total: int | None):
    """(input ids, mask, labels) of `pairs`; labels cut so source + target fit `max_total`."""
    enc = tok([p["source"] for p in pairs], return_tensors="pt", padding=True, truncation=True)
    labels = target_ids(tok, [p["target"] for p in pairs])
    if max_total:
        lengths = enc.attention_mask.sum(1).tolist()
        labels = [x[: max_total - n] for x, n in zip(labels, lengths)]
    lab = torch.full((len(labels), max(len(x) for x in labels)), -100)
    for i, x in enumerate(labels):
        lab[i, : len(x)] = torch.tensor(x)
    return enc.input_ids, enc.attention_mask, lab


TINY = {"vocab_size": 2000, "d_model": 64, "num_layers": 2, "num_heads": 4, "d_ff": 128}


def build(spec: str, tmp: Path, texts: list[str]) -> tuple[Path, dict]:
    """The model directory of `spec` and its training settings (`tiny@LR`: conf/model/tiny's
    T5, its vocabulary trained on the training `texts`)."""
    kind, *rest = spec.split("@")
    if kind == "tiny":
        out = cached_tiny_t5(tmp, texts, **TINY)
        return out, {"lr": float(rest[0]), "bf16": False, "word_dropout": 0.0, "max_total": None}
    if kind in ("copy", "prefix"):
        out = build_copy_lm(tmp / kind, use_copy=kind == "copy")
        bf16 = len(rest) > 1 and rest[1] == "bf16"
        return out, {"lr": float(rest[0]), "bf16": bf16, "word_dropout": 0.0, "max_total": 512}
    layers = int(rest[0])
    dtype = rest[1] if len(rest) > 1 else "bf16"
    init = rest[2] if len(rest) > 2 else "random"
    out = build_bert2bert(
        tmp / f"b2b-{layers}-{init}", decoder_layers=layers, cross_attention_init=init
    )
    return out, {"lr": float(kind), "bf16": dtype == "bf16", "word_dropout": 0.5, "max_total": None}


def train(model, tok, pairs, opts: dict, steps: int, size: int) -> tuple[float, float]:
    """(seconds per step, mean training loss of the last 3 steps)."""
    opt = torch.optim.AdamW(model.parameters(), lr=opts["lr"], weight_decay=1e-4)
    losses, start = [], time.perf_counter()
    for s in range(steps):
        ids, mask, lab = batch(tok, pairs[s * size : (s + 1) * size], opts["max_total"])
        kwargs = {}
        if opts["word_dropout"]:
            kwargs["decoder_input_ids"] = corrupt_decoder_inputs(
                model, tok, lab, opts["word_dropout"]
            )
        with autocast(opts["bf16"]):
            loss = model(input_ids=ids, attention_mask=mask, labels=lab, **kwargs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return (time.perf_counter() - start) / steps, sum(losses[-3:]) / 3


def autocast(bf16: bool):
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


@torch.no_grad()
def held_loss(model, tok, held, opts: dict, swap: bool = False) -> float:
    """Token-mean NLL on `held` (sources rotated by one passage with `swap`)."""
    total = count = 0.0
    for i in range(0, len(held), 16):
        part = held[i : i + 16]
        if swap:
            part = [
                {**p, "source": held[(i + k + 1) % len(held)]["source"]} for k, p in enumerate(part)
            ]
        ids, mask, lab = batch(tok, part, opts["max_total"])
        with autocast(opts["bf16"]):
            loss = token_nll(model(input_ids=ids, attention_mask=mask, labels=lab)).item()
        n = int((lab != -100).sum())
        total, count = total + loss * n, count + n
    return total / count


def quality(model, tok, held, max_new_tokens: int, batch_size: int) -> dict:
    """Parse rate, unsupported share and coverage (means over passages) of greedy outputs, and
    the generation speed (passages/s, output words per passage)."""
    start = time.perf_counter()
    texts, _ = generate_sorted(
        model,
        tok,
        [p["source"] for p in held],
        batch_size,
        max_new_tokens,
        decode=output_decoder(tok),
    )
    seconds = time.perf_counter() - start
    parsed, unsup, cover, words = 0, [], [], 0
    for p, text in zip(held, texts):
        result = parse_propositions(text)
        props = list(result.propositions) if result.ok else []
        parsed += bool(props)
        words += sum(len(x.split()) for x in props)
        passage = p["source"].split("Content: ", 1)[-1]
        u = unsupported(props, passage, [p["title"]])
        unsup += [u] if u is not None else []
        cover.append(coverage(passage, props) or 0.0)
    return {
        "parse": parsed / len(held),
        "unsupported": sum(unsup) / max(len(unsup), 1),
        "coverage": sum(cover) / len(cover),
        "pps": len(held) / seconds,
        "words": words / len(held),
        "example": texts[0][:200],
    }


def main() -> None:
    default = Path(os.environ.get("DENSEX_DATA_DIR", Path(__file__).parents[2] / "shared/data"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="*", default=["copy@1e-4", "prefix@1e-4", "3e-4@3@fp32@self"])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--generate", action="store_true", help="also decode the 32 passages")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--gen-batch", type=int, default=32, help="generation batch (passages)")
    ap.add_argument("--data-dir", type=Path, default=default / "squad-open")
    ap.add_argument("--held-out", type=int, default=32, help="held-out pairs for the loss")
    args = ap.parse_args()
    d = args.data_dir
    pairs = load_squad_open_pairs(d / "passages.jsonl", d / "propositions.jsonl")
    train_pairs, val_pairs = split_by_title(pairs, 0.1)
    random.Random(0).shuffle(train_pairs)
    held = random.Random(0).sample(val_pairs, min(args.held_out, len(val_pairs)))
    head = f"{'spec':>18} {'s/step':>7} {'train':>6} {'held':>6} {'swap gap':>8}"
    print(
        head
        + (
            f" {'parse':>6} {'unsup%':>6} {'cover%':>6} {'p/s':>6} {'words':>6} {'41M: h':>8}"
            if args.generate
            else ""
        )
    )
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.specs:
            torch.manual_seed(0)
            texts = [t for p in train_pairs for t in (p["source"], p["target"])]
            path, opts = build(spec, Path(tmp), texts)
            model, tok = load_seq2seq(path).train(), AutoTokenizer.from_pretrained(path)
            per_step, train_loss = train(model, tok, train_pairs, opts, args.steps, args.batch)
            model.eval()
            loss = held_loss(model, tok, held, opts)
            gap = held_loss(model, tok, held, opts, swap=True) - loss
            line = f"{spec:>18} {per_step:>7.2f} {train_loss:>6.3f} {loss:>6.3f} {gap:>8.3f}"
            if args.generate:
                q = quality(model, tok, held, args.max_new_tokens, args.gen_batch)
                hours = FACTOID_WIKI["passage"][0] / q["pps"] / 3600  # on this machine
                line += f" {q['parse']:>6.2f} {100 * q['unsupported']:>6.1f} {100 * q['coverage']:>6.1f}"
                line += f" {q['pps']:>6.2f} {q['words']:>6.1f} {hours:>8.0f}"
                line += "\n" + " " * 19 + json.dumps(q["example"], ensure_ascii=False)
            print(line, flush=True)


if __name__ == "__main__":
    main()
