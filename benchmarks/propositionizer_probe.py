"""Short training probes behind `experiment=propositionizer-cpu`'s settings, side by side.

For each `lr@decoder_layers[@fp32|bf16[@random|self]]` spec (the last: cross-attention init): build the MiniLM bert2bert
(`densex.propositionizer.backbone.build_bert2bert`), train `--steps` AdamW steps of `--batch`
squad-open pairs (the same seeded order for every spec), and report seconds per step, the
training loss and the loss on 32 held-out pairs. Run with nothing else on the machine:

    python benchmarks/propositionizer_probe.py --steps 15 --batch 8 \
        1e-4@3 3e-4@3 1e-3@3 3e-4@6 3e-4@3@fp32
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
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from densex.propositionizer.backbone import build_bert2bert, target_ids
from densex.propositionizer.pairs import format_source, format_target


def load_pairs(data_dir: Path) -> list[tuple[str, str]]:
    props = {}
    for line in (data_dir / "propositions.jsonl").open(encoding="utf-8"):
        row = json.loads(line)
        props[row["id"]] = row["propositions"]
    pairs = []
    for line in (data_dir / "passages.jsonl").open(encoding="utf-8"):
        p = json.loads(line)
        src = format_source(p["title"], p.get("section") or "", p["text"])
        pairs.append((src, format_target(props[p["id"]])))
    return pairs


def batch(tok, pairs):
    enc = tok([s for s, _ in pairs], return_tensors="pt", padding=True, truncation=True)
    labels = target_ids(tok, [t for _, t in pairs])
    width = max(len(x) for x in labels)
    lab = torch.full((len(labels), width), -100)
    for i, x in enumerate(labels):
        lab[i, : len(x)] = torch.tensor(x)
    return enc.input_ids, enc.attention_mask, lab


def probe(model_dir: Path, pairs, held, lr: float, bf16: bool, steps: int, size: int) -> dict:
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    losses, start = [], time.perf_counter()
    for s in range(steps):
        ids, mask, lab = batch(tok, pairs[s * size : (s + 1) * size])
        with autocast():
            loss = model(input_ids=ids, attention_mask=mask, labels=lab).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    per_step = (time.perf_counter() - start) / steps
    model.eval()
    held_losses = []
    with torch.no_grad(), autocast():
        for i in range(0, len(held), 16):
            ids, mask, lab = batch(tok, held[i : i + 16])
            held_losses.append(model(input_ids=ids, attention_mask=mask, labels=lab).loss.item())
    return {
        "s_per_step": round(per_step, 2),
        "train_loss_last3": round(sum(losses[-3:]) / 3, 3),
        "heldout_loss": round(sum(held_losses) / len(held_losses), 3),
    }


def main() -> None:
    default = Path(os.environ.get("DENSEX_DATA_DIR", Path(__file__).parents[2] / "shared/data"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="*", default=["1e-4@3", "3e-4@3", "1e-3@3", "3e-4@6"])
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--data-dir", type=Path, default=default / "squad-open")
    ap.add_argument("--held-out", type=int, default=32, help="held-out pairs for the loss")
    args = ap.parse_args()
    pairs = load_pairs(args.data_dir)
    random.Random(0).shuffle(pairs)
    held, train = pairs[: args.held_out], pairs[args.held_out :]
    print(
        f"{'lr':>8} {'layers':>6} {'dtype':>5} {'xattn':>6} {'s/step':>7} {'train':>7} {'held-out':>8}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        built: dict[tuple[int, str], Path] = {}
        for spec in args.specs:
            lr, layers, *rest = spec.split("@")
            layers, dtype = int(layers), (rest[0] if rest else "bf16")
            init = rest[1] if len(rest) > 1 else "random"
            if (layers, init) not in built:
                built[layers, init] = build_bert2bert(
                    Path(tmp) / f"l{layers}-{init}",
                    decoder_layers=layers,
                    cross_attention_init=init,
                )
            model_dir = built[layers, init]
            r = probe(model_dir, train, held, float(lr), dtype == "bf16", args.steps, args.batch)
            print(
                f"{lr:>8} {layers:>6} {dtype:>5} {init:>6} {r['s_per_step']:>7} "
                f"{r['train_loss_last3']:>7} {r['heldout_loss']:>8}",
                flush=True,
            )


if __name__ == "__main__":
    main()
