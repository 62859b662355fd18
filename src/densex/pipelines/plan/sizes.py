"""The size model of `index.py stage=plan`: bytes, machine needs and times of each artifact for
n units at dimension d, and the index setting that fits a machine (`fits`).

Contract: pure arithmetic on counts, dimensions and the documented assumptions below (marked
`assumed` in the plan's notes); nothing is read or probed here. Sizes are decimal
(1 GB = 1e9 bytes). The model itself (per granularity, n units, dimension d) is written out
in docs/architecture.md (Pipelines, `plan`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from densex.corpus.spec import GRANULARITIES

GB = 1e9

# Table 1 of Chen et al. (2023): English Wikipedia 2021-10-13 (FactoidWiki); also in
# conf/corpus/factoid-wiki.yaml (expected_units / expected_avg_words)
FACTOID_WIKI = {
    "passage": (41_393_528, 58.5),
    "sentence": (114_219_127, 21.0),
    "proposition": (256_885_003, 11.2),
}

# Documented assumptions (used only when nothing was measured; printed as `assumed`):
UNIT_OVERHEAD_BYTES = 48  # id string (~30 B), offsets and passage row of a stored unit
# units/s of one A100 (bf16, dynamic padding) for ~128-token inputs, by encoder size: a
# 110M-parameter BERT-base / T5-base encoder ~3,000/s; DistilBERT (66M) ~2x; MiniLM-L6 ~5x;
# the model-free hash retriever is CPU-bound (per process)
GPU_UNITS_PER_SECOND_128 = {
    "simcse": 3000.0,
    "contriever": 3000.0,
    "dpr": 3000.0,
    "ance": 3000.0,
    "gtr": 3000.0,
    "tasb": 6000.0,
    "minilm": 15000.0,
}
DEFAULT_GPU_UNITS_PER_SECOND_128 = 3000.0
HASH_UNITS_PER_SECOND = 20000.0  # per CPU process (tokenise + hash), assumed
GPU_FLOPS_FP16 = 50e12  # effective cuBLAS fp16 GEMM of one A100 in faiss flat search
DISK_BYTES_PER_SECOND = 1e9  # reading memory-mapped shards that are not in the page cache
PQ_LOOKUPS_PER_SECOND_PER_CORE = 1e9  # ADC table lookups of IVF-PQ scanning
FAISS_GPU_TEMP_BYTES = 1.5 * GB  # StandardGpuResources' temporary memory, per GPU
REFERENCE_GPUS = 8  # GPU columns when the planned machine has none: one 8-GPU node
PQ_M = 64


def nlist_for(n: int) -> int:
    """Inverted lists of `IVF{nlist}` for n vectors (the rule of retrieval.faiss_index)."""
    return max(1, min(int(4 * math.sqrt(max(n, 1))), n // 39))


BUILD_BLOCK_ROWS = 65536  # rows of one streamed block of vectors in the index build


def sizes(n: int, dim: int | None, bytes_per_unit: float, m: int = PQ_M) -> dict[str, float]:
    """Bytes of each artifact for n units at `dim` (see the module docstring)."""
    out = {"units": n * bytes_per_unit, "rows": n * 8.0}
    if dim is None:
        return out
    nlist = nlist_for(n)
    out.update(
        emb_fp32=n * dim * 4.0,
        emb_fp16=n * dim * 2.0,
        flat_fp32=n * dim * 4.0,
        flat_fp16=n * dim * 2.0,
        ivfpq=n * (m + 8.0) + nlist * dim * 4.0 + 256 * dim * 4.0,
        nlist=float(nlist),
    )
    return out


def _tokens(avg_words: float, title: bool) -> float:
    return 1.35 * (avg_words + (4.0 if title else 0.0)) + 2.0


def gpu_units_per_second(retriever: Mapping[str, Any], avg_words: float) -> float:
    """Assumed units/s of one A100 for this retriever at this unit length (the 128-token
    figure scaled by tokens per unit, at most 4x for very short units)."""
    name = str(retriever.get("name", ""))
    if str(retriever.get("type", "dense")) == "hash":
        return HASH_UNITS_PER_SECOND
    base = GPU_UNITS_PER_SECOND_128.get(name, DEFAULT_GPU_UNITS_PER_SECOND_128)
    max_len = float(retriever.get("max_length") or 512)
    tokens = min(max_len, _tokens(avg_words, str(retriever.get("title", "none")) != "none"))
    return base * min(4.0, 128.0 / max(tokens, 1.0))


def memory_needs(s: Mapping[str, float], budget_gb: float, gpus: int) -> dict[str, Any]:
    """nlist, RAM (whole index / one memory-mapped shard of `budget_gb`), bytes per GPU and
    disk of a dense index with the artifact sizes `s` (from `sizes`)."""
    index = s["flat_fp32"]
    shards = max(1, math.ceil(index / (budget_gb * GB)))
    # the build holds one pre-sized index shard and one streamed block of fp32 vectors
    # (`retrieval.faiss_index.iter_arrays`: 65,536 rows), beside the per-unit rows
    n = s["rows"] / 8.0
    block = min(n, BUILD_BLOCK_ROWS) * (s["emb_fp32"] / max(n, 1.0))
    return {
        "nlist": int(s["nlist"]),
        "ram_whole_bytes": index + s["rows"],
        "shards": shards,
        "ram_mmap_bytes": index / shards + s["rows"],
        "ram_build_bytes": index / shards + block + s["rows"],
        "gpus": gpus,
        "gpu_fp32_bytes": s["flat_fp32"] / gpus + FAISS_GPU_TEMP_BYTES,
        "gpu_fp16_bytes": s["flat_fp16"] / gpus + FAISS_GPU_TEMP_BYTES,
        "gpu_ivfpq_bytes": s["ivfpq"] / gpus + FAISS_GPU_TEMP_BYTES,
        "disk_total_bytes": s["units"] + s["emb_fp16"] + s["flat_fp32"],
    }


def time_needs(
    n: int,
    dim: int,
    s: Mapping[str, float],
    avg_words: float,
    retriever: Mapping[str, Any],
    box: Mapping[str, Any],
    gpus: int,
    measured: Mapping[str, Any] | None,
    flops: float,
    nprobe: int,
) -> dict[str, Any]:
    """Seconds to encode n units (on `gpus` GPUs, or one CPU process for the hash retriever;
    `encode_here_s` when this machine's throughput was `measured`) and to search
    `box["queries"]` queries: exact on CPU / GPUs, IVF-PQ on `box["cores"]` cores."""
    out: dict[str, Any] = {}
    gpu_ups = gpu_units_per_second(retriever, avg_words)
    on_cpu = str(retriever.get("type", "dense")) == "hash"  # model-free: one process
    out["encode_gpu_s"] = n / (gpu_ups * (1 if on_cpu else gpus))
    out["encode_gpu_ups"] = gpu_ups
    out["encode_on"] = "1 CPU process" if on_cpu else f"{gpus} GPUs"
    if measured:
        out["encode_here_s"] = n / measured["units_per_second"]
    q = box["queries"]
    gemm = 2.0 * q * n * dim
    out["search_cpu_s"] = max(s["flat_fp32"] / DISK_BYTES_PER_SECOND, gemm / flops)
    out["search_gpu_s"] = gemm / (GPU_FLOPS_FP16 * gpus)
    scanned = q * n * min(1.0, nprobe / s["nlist"]) * PQ_M
    out["search_ivfpq_s"] = scanned / (PQ_LOOKUPS_PER_SECOND_PER_CORE * box["cores"])
    return out


def plan_rows(
    label: str,
    units: Mapping[str, Mapping[str, Any]],
    retriever: Mapping[str, Any],
    dim: int | None,
    box: Mapping[str, Any],
    budget_gb: float,
    measured: Mapping[str, Any] | None,
    flops: float,
    nprobe: int = 32,
) -> list[dict[str, Any]]:
    """One row per granularity of `units`: sizes, RAM/GPU needs, times and the index setting
    that fits `box` (see `densex.pipelines.plan.plan`)."""
    rows = []
    gpus = box["gpus"] or REFERENCE_GPUS
    for g in GRANULARITIES:
        if g not in units:
            continue
        u = units[g]
        n = int(u["count"])
        s = sizes(n, dim, float(u["bytes_per_unit"]))
        row: dict[str, Any] = {
            "corpus": label,
            "granularity": g,
            "units": n,
            "count_source": u.get("source", ""),
            "bytes_per_unit": float(u["bytes_per_unit"]),
            "dim": dim,
            **{f"{k}_bytes": v for k, v in s.items() if k != "nlist"},
        }
        if dim is not None:
            row.update(memory_needs(s, budget_gb, gpus))
            avg_words = float(u.get("avg_words") or 20.0)
            row.update(
                time_needs(n, dim, s, avg_words, retriever, box, gpus, measured, flops, nprobe)
            )
            row["fits"] = fits(row, box)
        else:
            row["disk_total_bytes"] = s["units"]
            row["fits"] = "sparse (bm25): no vectors"
        rows.append(row)
    return rows


def fits(row: Mapping[str, Any], box: Mapping[str, Any]) -> str:
    """The preferred index setting that fits `box`: exact search on all GPUs (fp32, else
    fp16), exact in RAM, exact over memory-mapped shards (disk permitting), IVF-PQ."""
    gpu = box["gpu_mem_gb"] * GB
    if box["gpus"]:
        if row["gpu_fp32_bytes"] <= gpu:
            return f"Flat fp32 on {box['gpus']} GPUs"
        if row["gpu_fp16_bytes"] <= gpu:
            return f"Flat fp16 on {box['gpus']} GPUs (faiss useFloat16)"
    disk_ok = row["disk_total_bytes"] <= box["disk_gb"] * GB
    if row["ram_whole_bytes"] <= 0.8 * box["ram_gb"] * GB and disk_ok:
        return "Flat fp32 in RAM"
    if disk_ok and row["ram_mmap_bytes"] <= 0.8 * box["ram_gb"] * GB:
        return f"Flat fp32, {row['shards']:,} mmap shards"
    pq_disk = row["units_bytes"] + row["emb_fp16_bytes"] + row["ivfpq_bytes"]
    if pq_disk <= box["disk_gb"] * GB and row["ivfpq_bytes"] <= 0.8 * box["ram_gb"] * GB:
        return "IVF-PQ (index=ivfpq)" + ("" if disk_ok else "; Flat needs more disk")
    return "does not fit: needs more disk" if not disk_ok else "does not fit"
