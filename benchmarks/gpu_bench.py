"""The device-machine measurements, one process (run through `benchmarks/gpu.sh`, < 8 min):

1. encoder throughput of the packaged all-MiniLM-L6-v2 and of a GTR-base-shaped T5 encoder
   (`T5Config` with gtr-t5-base's dimensions, random weights) in fp16 and bf16 autocast,
   units/s and tokens/s at `--seq` tokens a unit;
2. exact inner-product search over `--units` x `--dim` fp16 vectors with faiss on the GPU
   (`GpuIndexFlatIP`, float16 storage), queries/s for top-100 (faiss-cpu only: a torch fp16
   GEMM + top-k on the device, said so);
3. training steps of a Flan-T5-large-shaped propositionizer (`T5Config` with flan-t5-large's
   dimensions, random weights: no download) at batch `--batch` in bf16 autocast with AdamW:
   tokens/s, peak memory and MFU (6 x parameters x tokens/s over `--peak-tflops`).

`--tiny` runs every part at toy shapes on whatever device there is (the CPU test). Weights are
random where the real ones are not on the machine; speed does not depend on their values.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

FULL = {"units": 4_000_000, "dim": 768, "queries": 10_000, "encode": 8192, "seq": 128,
        "batch": 64, "steps": 10, "src": 512, "tgt": 256}  # fmt: skip
TINY = {"units": 2000, "dim": 32, "queries": 16, "encode": 16, "seq": 16,
        "batch": 2, "steps": 2, "src": 16, "tgt": 8}  # fmt: skip
GTR_BASE = {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12, "d_kv": 64,
            "vocab_size": 32128, "feed_forward_proj": "relu"}  # fmt: skip
FLAN_T5_LARGE = {"d_model": 1024, "d_ff": 2816, "num_layers": 24, "num_decoder_layers": 24,
                 "num_heads": 16, "d_kv": 64, "vocab_size": 32128,
                 "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}  # fmt: skip
TOY_T5 = {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 2,
          "d_kv": 16, "vocab_size": 32128}  # fmt: skip


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: torch.device, repeat: int = 1) -> float:
    """Seconds per call of `fn` after one warm-up call."""
    fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / repeat


def encoder_throughput(device: torch.device, s: dict, tiny: bool) -> None:
    from transformers import AutoModel, T5Config, T5EncoderModel

    from densex.utils.models import minilm_path

    models = {"MiniLM-L6 (packaged weights)": AutoModel.from_pretrained(minilm_path())}
    toy = {k: TOY_T5[k] for k in ("d_model", "d_ff", "num_layers", "num_heads", "d_kv")}
    gtr = {**GTR_BASE, **toy} if tiny else GTR_BASE
    models["GTR-base-shaped T5 encoder (random)"] = T5EncoderModel(T5Config(**gtr))
    n, seq = s["encode"], s["seq"]
    bs = min(n, 256)
    for name, model in models.items():
        model.to(device).eval()
        vocab = model.config.vocab_size
        ids = torch.randint(5, vocab - 1, (bs, seq), device=device)
        mask = torch.ones_like(ids)
        for dtype in (torch.float16, torch.bfloat16):
            if device.type == "cpu" and dtype == torch.float16:
                continue  # CPU autocast is bf16 only

            def run(model=model, ids=ids, mask=mask, dtype=dtype) -> None:
                with torch.inference_mode(), torch.autocast(device.type, dtype=dtype):
                    for _ in range(max(1, n // bs)):
                        model(input_ids=ids, attention_mask=mask)

            dt = timed(run, device)
            units = max(1, n // bs) * bs
            print(f"encode {name} {str(dtype)[6:]}: {units / dt:,.0f} units/s, "
                  f"{units * seq / dt:,.0f} tokens/s ({seq} tokens a unit, batch {bs})")  # fmt: skip
        model.to("cpu")
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()


def exact_search(device: torch.device, s: dict) -> None:
    import faiss

    n, d, nq, k = s["units"], s["dim"], s["queries"], 100
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((nq, d), dtype=np.float32)
    gpu = device.type == "cuda" and hasattr(faiss, "StandardGpuResources")
    if gpu:
        res = faiss.StandardGpuResources()
        cfg = faiss.GpuIndexFlatConfig()
        cfg.useFloat16 = True
        index = faiss.GpuIndexFlatIP(res, d, cfg)
        for start in range(0, n, 500_000):  # host memory: one block of vectors at a time
            index.add(rng.standard_normal((min(500_000, n - start), d), dtype=np.float32))
        what = "faiss GpuIndexFlatIP, float16 storage"
        dt = timed(lambda: index.search(queries, k), device)
    else:
        xb = torch.from_numpy(rng.standard_normal((n, d), dtype=np.float32)).to(device)
        xq = torch.from_numpy(queries).to(device)
        half = torch.float16 if device.type == "cuda" else torch.float32
        xb, xq = xb.to(half), xq.to(half)
        why = "no faiss GPU in this build" if device.type == "cuda" else "CPU"
        what = f"torch {str(half)[6:]} GEMM + top-k ({why})"

        def run() -> None:
            for b in range(0, nq, 1024):
                torch.topk(xq[b : b + 1024] @ xb.T, min(k, n), dim=1)

        dt = timed(run, device)
    print(f"search {what}: {n:,} x {d} vectors, {nq:,} queries, top-{k}: {nq / dt:,.0f} "
          f"queries/s ({dt:.2f} s)")  # fmt: skip


def train_steps(device: torch.device, s: dict, tiny: bool, peak_tflops: float) -> None:
    from transformers import T5Config, T5ForConditionalGeneration

    shape = TOY_T5 if tiny else FLAN_T5_LARGE
    model = T5ForConditionalGeneration(T5Config(**shape, decoder_start_token_id=0)).to(device)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4)
    b, src, tgt = s["batch"], s["src"], s["tgt"]
    ids = torch.randint(5, shape["vocab_size"] - 1, (b, src), device=device)
    labels = torch.randint(5, shape["vocab_size"] - 1, (b, tgt), device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    dt = timed(lambda: [step() for _ in range(s["steps"])], device) / s["steps"]
    tokens = b * (src + tgt) / dt
    peak = torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else float("nan")
    mfu = 6 * params * tokens / (peak_tflops * 1e12)
    name = "toy T5" if tiny else "Flan-T5-large-shaped T5 (random)"
    print(f"train {name}: {params / 1e6:,.1f}M parameters, batch {b} x ({src} + {tgt}) tokens, "
          f"bf16 autocast: {dt:.3f} s/step, {tokens:,.0f} tokens/s, peak memory {peak:.1f} GB, "
          f"MFU {mfu:.1%} of {peak_tflops:g} TFLOP/s")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="toy shapes (the CPU test)")
    ap.add_argument("--parts", nargs="+", default=["encode", "search", "train"])
    ap.add_argument("--peak-tflops", type=float, default=989.0,
                    help="the device's dense bf16 peak (H100/H200 SXM: 989)")  # fmt: skip
    for key, value in FULL.items():
        ap.add_argument(
            f"--{key}", type=int, default=None, help=f"default {value} (tiny: {TINY[key]})"
        )
    args = ap.parse_args()
    shapes = {k: getattr(args, k) or (TINY if args.tiny else FULL)[k] for k in FULL}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(f"device: {name}; torch {torch.__version__}; shapes {shapes}", flush=True)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    if "encode" in args.parts:
        encoder_throughput(device, shapes, args.tiny)
    if "search" in args.parts:
        exact_search(device, shapes)
    if "train" in args.parts:
        train_steps(device, shapes, args.tiny, args.peak_tflops)
    print(f"gpu benchmark done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
