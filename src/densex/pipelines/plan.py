"""`index.py stage=plan`: what each stage will need (disk, RAM, GPU memory, time) before anything
runs, for the configured corpus and for FactoidWiki (the paper's Table 1), and which index /
shard settings fit a machine.

Nothing is built, downloaded or loaded: counts come from the configured corpus's files (its
units cache, or a sample of its input files) or from `expected_units` (Table 1 for
`corpus=factoid-wiki`); the embedding dimension from `retriever.dim`, a local model's
config files, or the known dimension of the paper's retrievers; throughputs from the
embeddings manifests already in `paths.cache_dir` (`units_per_second`), else the documented
assumptions below (marked `assumed` in the output). Sizes are decimal (1 GB = 1e9 bytes).

Size model (per granularity, n units, dimension d):
- units: n x (bytes per unit); passages are stored once besides the units (not counted);
- embeddings: n*d*4 (fp32) / n*d*2 (fp16; the cached shards' dtype is the retriever's);
- Flat fp32 / fp16 (faiss `Flat` / `SQfp16`): n*d*4 / n*d*2;
- IVF-PQ (`conf/index/ivfpq.yaml`, `IVF{nlist},PQ64`): n*(m + 8) bytes (m = 64 code bytes
  + an int64 id per vector in the inverted lists) + nlist*d*4 (coarse centroids) + 256*d*4
  (PQ codebooks), nlist = min(4*sqrt(n), n // 39) as `retrieval.faiss_index` computes it;
- RAM to search: the whole index + the unit->passage rows (int64, 8 bytes/unit), or
  memory-mapped shards searched one at a time: shards = ceil(index / memory budget), RAM =
  one shard + the same per-unit rows;
- GPU (`index_cpu_to_all_gpus`, shard=True): index / G per GPU + ~1.5 GB faiss temp memory.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from densex.corpus.units_key import units_dir_for
from densex.utils.config import plain_data
from densex.utils.logging import get_logger, render
from densex.utils.models import resolve_model

log = get_logger(__name__)

__all__ = ["FACTOID_WIKI", "KNOWN_DIMS", "plan", "print_plan", "retriever_dim", "run_plan"]

GRANULARITIES = ("passage", "sentence", "proposition")
GB = 1e9

# Table 1 of Chen et al. (2023): English Wikipedia 2021-10-13 (FactoidWiki); also in
# conf/corpus/factoid-wiki.yaml (expected_units / expected_avg_words)
FACTOID_WIKI = {
    "passage": (41_393_528, 58.5),
    "sentence": (114_219_127, 21.0),
    "proposition": (256_885_003, 11.2),
}
# Output dimension of the paper's six retrievers and the packaged MiniLM (model cards /
# config.json: BERT-base and T5-base hidden size, GTR's Dense projection 768 -> 768)
KNOWN_DIMS = {
    "simcse": 768,
    "contriever": 768,
    "dpr": 768,
    "ance": 768,
    "tasb": 768,
    "gtr": 768,
    "minilm": 384,
}

# Documented assumptions (used only when nothing was measured; printed as `assumed`):
BYTES_PER_WORD = 6.1  # English Wikipedia text, UTF-8: ~5.1 characters per word + a space
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
REFERENCE_GPU_MEM_GB = 80.0  # A100/H100 80 GB
DEFAULT_MEMORY_BUDGET_GB = 2.0
PQ_M = 64


# ----------------------------------------------------------------------------- inputs


def _node_dict(node: Any) -> dict[str, Any]:
    return dict(plain_data(node) or {})


def retriever_dim(retriever_cfg: Mapping[str, Any]) -> tuple[int | None, str]:
    """(embedding dimension, where it came from) without any network access: `dim` (hash),
    a local model's files (sentence-transformers Dense module, else config.json), or
    `KNOWN_DIMS`; (None, "sparse") for a sparse retriever."""
    r = _node_dict(retriever_cfg)
    if str(r.get("type", "dense")) == "sparse":
        return None, "sparse"
    if r.get("dim"):
        return int(r["dim"]), "retriever.dim"
    model = r.get("doc_model") or r.get("query_model")
    if model:
        try:
            local = Path(resolve_model(str(model)))
        except (FileNotFoundError, ImportError):
            local = None
        if local is not None and local.is_dir():
            dim = _local_model_dim(local)
            if dim:
                return dim, f"{local.name} config"
    name = str(r.get("name", ""))
    if name in KNOWN_DIMS:
        return KNOWN_DIMS[name], "known dim of the paper retrievers"
    return 768, "assumed (BERT-base)"


def _local_model_dim(path: Path) -> int | None:
    """Output dimension from a model directory's files: the last sentence-transformers Dense
    module's out_features, else the transformer's hidden size."""
    modules = path / "modules.json"
    if modules.is_file():
        try:
            entries = json.loads(modules.read_text())
        except json.JSONDecodeError:
            entries = []
        for entry in reversed(entries):
            if str(entry.get("type", "")).endswith("Dense"):
                cfg = path / entry.get("path", "") / "config.json"
                if cfg.is_file():
                    return int(json.loads(cfg.read_text())["out_features"])
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        return None
    cfg = json.loads(cfg_path.read_text())
    if int(cfg.get("projection_dim") or 0) > 0:  # DPR with a projection
        return int(cfg["projection_dim"])
    for key in ("hidden_size", "d_model", "dim"):
        if cfg.get(key):
            return int(cfg[key])
    return None


def measured_units_per_second(cache_dir: str | os.PathLike, retriever: str) -> dict | None:
    """The embeddings manifest of `retriever` in the cache that encoded the most units this
    run: `{units_per_second, count, processes, path}`; None when there is none."""
    best = None
    for manifest in Path(cache_dir, "embeddings", retriever).glob("*/manifest.json"):
        try:
            m = json.loads(manifest.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        ups, encoded = m.get("units_per_second"), m.get("encoded_this_run") or 0
        if ups and (best is None or encoded > best["encoded"]):
            best = {
                "units_per_second": float(ups),
                "encoded": int(encoded),
                "processes": int(m.get("processes") or 1),
                "path": str(manifest.parent),
            }
    return best


def _sample_jsonl(path: Path, lines: int = 2000) -> list[dict]:
    rows = []
    with path.open("rb") as f:
        for raw in f:
            if len(rows) >= lines:
                break
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _count_lines(path: Path, chunk: int = 16 << 20) -> int:
    n = 0
    with path.open("rb") as f:
        while block := f.read(chunk):
            n += block.count(b"\n")
    return n


def _words(text: Any) -> int:
    return len(str(text).split())


def _from_units_cache(corpus: Mapping[str, Any], cache_dir: Path) -> dict[str, dict] | None:
    """Counts and bytes per unit of this corpus's built units dir (`units_dir_for`: the same
    inputs and settings), when it exists."""
    try:
        unit_dir = Path(units_dir_for(corpus, cache_dir))
    except Exception:  # noqa: BLE001 - no input to key by (e.g. a hub collection): not built
        return None
    for manifest in [unit_dir / "manifest.json"]:
        if not manifest.is_file():
            continue
        try:
            m = json.loads(manifest.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        units = m.get("units") or {}
        out = {}
        for g in GRANULARITIES:
            count = (units.get(g) or {}).get("count")
            files = [p for p in manifest.parent.iterdir() if p.name.split(".")[0] == g]
            if not count or not files:
                continue
            size = sum(p.stat().st_size for p in files)
            out[g] = {
                "count": int(count),
                "bytes_per_unit": size / count,
                "avg_words": (units.get(g) or {}).get("avg_words"),
                "source": f"units cache {manifest.parent.name}",
            }
        if out:
            return out
    return None


def _from_inputs(corpus: Mapping[str, Any]) -> dict[str, dict]:
    """Counts and bytes per unit from the corpus's input files (passages + propositions JSONL),
    read in full only to count lines; sentences estimated at Table 1's 21 words each."""
    out: dict[str, dict] = {}
    passages = corpus.get("passages")
    if not passages or not Path(str(passages)).is_file():
        return out
    ppath = Path(str(passages))
    sample = _sample_jsonl(ppath)
    if not sample:
        return out
    n_pass = _count_lines(ppath)
    words = sum(_words(r.get("text", "")) for r in sample) / len(sample)
    text_bytes = sum(len(str(r.get("text", "")).encode()) for r in sample)
    bpw = text_bytes / max(1, sum(_words(r.get("text", "")) for r in sample))
    source = f"sampled {ppath.name}"
    out["passage"] = {"count": n_pass, "avg_words": words, "bytes_per_word": bpw,
                      "bytes_per_unit": ppath.stat().st_size / max(n_pass, 1), "source": source}  # fmt: skip
    n_sent = round(n_pass * words / FACTOID_WIKI["sentence"][1])
    out["sentence"] = {"count": n_sent, "avg_words": FACTOID_WIKI["sentence"][1],
                       "bytes_per_unit": UNIT_OVERHEAD_BYTES + bpw * FACTOID_WIKI["sentence"][1],
                       "source": f"estimated from {ppath.name}"}  # fmt: skip
    props = corpus.get("propositions")
    if props and Path(str(props)).is_file():
        prow = _sample_jsonl(Path(str(props)))
        texts = [p for r in prow for p in (r.get("propositions") or []) if isinstance(p, str)]
        if prow and texts:
            per_passage = len(texts) / len(prow)
            pw = sum(_words(t) for t in texts) / len(texts)
            out["proposition"] = {
                "count": round(n_pass * per_passage),
                "avg_words": pw,
                "bytes_per_unit": UNIT_OVERHEAD_BYTES
                + sum(len(t.encode()) for t in texts) / len(texts),
                "source": f"sampled {Path(str(props)).name}",
            }
    return out


def _sampled_bytes_per_word(corpus: Mapping[str, Any]) -> tuple[float, str]:
    """Bytes per word of the corpus's text from a sample of a local passages file or
    collection, else `BYTES_PER_WORD` (assumed)."""
    candidates = [corpus.get("passages")]
    sources = corpus.get("sources") or {}
    candidates += [(sources.get(g) or {}).get("path") for g in GRANULARITIES]
    for cand in candidates:
        if not cand:
            continue
        path = Path(os.path.expanduser(str(cand)))
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.jsonl"))
            path = files[0] if files else path
        if not path.is_file():
            continue
        texts = [str(r.get("text") or r.get("contents") or "") for r in _sample_jsonl(path)]
        words = sum(_words(t) for t in texts)
        if words:
            return sum(len(t.encode()) for t in texts) / words, f"sampled {path.name}"
    return BYTES_PER_WORD, "assumed"


def corpus_units(corpus: Mapping[str, Any], cache_dir: str | os.PathLike) -> dict[str, dict]:
    """Per granularity `{count, bytes_per_unit, avg_words, source}` of the configured corpus:
    its units cache, else its input files, else `expected_units` (+ `expected_avg_words`)."""
    corpus = _node_dict(corpus)
    found = _from_units_cache(corpus, Path(cache_dir)) or _from_inputs(corpus)
    expected = corpus.get("expected_units") or {}
    avg_words = corpus.get("expected_avg_words") or {}
    bpw, bpw_source = _sampled_bytes_per_word(corpus)
    for g in GRANULARITIES:
        if g in found or not expected.get(g):
            continue
        words = float(avg_words.get(g) or FACTOID_WIKI[g][1])
        found[g] = {
            "count": int(expected[g]),
            "avg_words": words,
            "bytes_per_unit": UNIT_OVERHEAD_BYTES + bpw * words,
            "source": f"expected_units; bytes/word {bpw_source}",
        }
    return found


def _total_ram_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GB
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 16.0


def machine(plan_cfg: Mapping[str, Any], cache_dir: str | os.PathLike) -> dict[str, Any]:
    """The machine to plan for: `plan.*` keys, defaulting to this one (RAM from sysconf, free
    disk where `paths.cache_dir` lives, GPUs and their memory from torch.cuda)."""
    p = _node_dict(plan_cfg)
    gpus, gpu_mem = p.get("gpus"), p.get("gpu_mem_gb")
    if gpus is None or (gpus and gpu_mem is None):
        import torch

        if gpus is None:
            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus and gpu_mem is None and torch.cuda.is_available():
            gpu_mem = torch.cuda.get_device_properties(0).total_memory / GB
    where = Path(cache_dir)
    while not where.exists() and where != where.parent:
        where = where.parent
    return {
        "ram_gb": float(p.get("ram_gb") or _total_ram_gb()),
        "disk_gb": float(p.get("disk_gb") or shutil.disk_usage(where).free / GB),
        "gpus": int(gpus or 0),
        "gpu_mem_gb": float(gpu_mem or REFERENCE_GPU_MEM_GB),
        "cores": int(p.get("cores") or os.cpu_count() or 1),
        "queries": int(p.get("queries") or 3610),
    }


def cpu_flops(seconds: float = 0.3) -> float:
    """Measured float32 GEMM FLOP/s of this process (numpy BLAS, a ~0.3 s probe)."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((1024, 768), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((768, 2048), dtype=np.float32)
    a @ b  # warm-up
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        a @ b
        n += 1
    return 2.0 * 1024 * 768 * 2048 * n / elapsed


# ----------------------------------------------------------------------------- arithmetic


def nlist_for(n: int) -> int:
    """Inverted lists of `IVF{nlist}` for n vectors (the rule of retrieval.faiss_index)."""
    return max(1, min(int(4 * math.sqrt(max(n, 1))), n // 39))


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
    that fits `box` (see `plan`)."""
    rows = []
    gpus = box["gpus"] or REFERENCE_GPUS
    q = box["queries"]
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
            index = s["flat_fp32"]
            shards = max(1, math.ceil(index / (budget_gb * GB)))
            row.update(
                nlist=int(s["nlist"]),
                ram_whole_bytes=index + s["rows"],
                shards=shards,
                ram_mmap_bytes=index / shards + s["rows"],
                gpus=gpus,
                gpu_fp32_bytes=s["flat_fp32"] / gpus + FAISS_GPU_TEMP_BYTES,
                gpu_fp16_bytes=s["flat_fp16"] / gpus + FAISS_GPU_TEMP_BYTES,
                gpu_ivfpq_bytes=s["ivfpq"] / gpus + FAISS_GPU_TEMP_BYTES,
                disk_total_bytes=s["units"] + s["emb_fp16"] + s["flat_fp32"],
            )
            gpu_ups = gpu_units_per_second(retriever, float(u.get("avg_words") or 20.0))
            on_cpu = str(retriever.get("type", "dense")) == "hash"  # model-free: one process
            row["encode_gpu_s"] = n / (gpu_ups * (1 if on_cpu else gpus))
            row["encode_gpu_ups"] = gpu_ups
            row["encode_on"] = "1 CPU process" if on_cpu else f"{gpus} GPUs"
            if measured:
                row["encode_here_s"] = n / measured["units_per_second"]
            gemm = 2.0 * q * n * dim
            row["search_cpu_s"] = max(index / DISK_BYTES_PER_SECOND, gemm / flops)
            row["search_gpu_s"] = gemm / (GPU_FLOPS_FP16 * gpus)
            scanned = q * n * min(1.0, nprobe / s["nlist"]) * PQ_M
            row["search_ivfpq_s"] = scanned / (PQ_LOOKUPS_PER_SECOND_PER_CORE * box["cores"])
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


def plan(cfg: DictConfig | Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows (one per corpus x granularity) of the budget of this config's corpus and of
    FactoidWiki at the retriever's dimension, for the machine of `plan.*`; no network, nothing
    built. Keys: corpus, granularity, units, count_source, bytes_per_unit, dim, *_bytes sizes
    (units, emb_fp32/fp16, flat_fp32/fp16, ivfpq, ram_whole, ram_mmap, gpu_*, disk_total),
    nlist, shards, gpus, encode_gpu_s, encode_here_s (when measured), search_*_s, fits."""
    retriever = _node_dict(cfg["retriever"])
    dim, _ = retriever_dim(retriever)
    cache_dir = str(cfg["paths"]["cache_dir"])
    box = machine(cfg.get("plan"), cache_dir)
    index_cfg = _node_dict(cfg.get("index"))
    budget = float(index_cfg.get("memory_budget_gb") or DEFAULT_MEMORY_BUDGET_GB)
    nprobe = int((index_cfg.get("params") or {}).get("nprobe") or 32)
    measured = measured_units_per_second(cache_dir, str(retriever.get("name")))
    flops = cpu_flops() if dim is not None else 1.0
    corpus = _node_dict(cfg["corpus"])
    label = str(corpus.get("name") or "corpus")
    rows = plan_rows(label, corpus_units(corpus, cache_dir), retriever, dim, box, budget,
                     measured, flops, nprobe)  # fmt: skip
    if label != "factoid-wiki":
        bpw, src = _sampled_bytes_per_word(corpus)
        fw = {
            g: {
                "count": n,
                "avg_words": w,
                "bytes_per_unit": UNIT_OVERHEAD_BYTES + bpw * w,
                "source": f"Table 1; bytes/word {src}",
            }  # fmt: skip
            for g, (n, w) in FACTOID_WIKI.items()
        }
        rows += plan_rows("factoid-wiki", fw, retriever, dim, box, budget, measured, flops,
                          nprobe)  # fmt: skip
    for row in rows:
        row["machine"] = box
        row["memory_budget_gb"] = budget
        row["cpu_flops"] = flops
        row["measured"] = measured
    return rows


# ----------------------------------------------------------------------------- printing


def _gb(b: float | None) -> str:
    if b is None:
        return "-"
    gb = b / GB
    return f"{gb:,.0f} GB" if gb >= 100 else f"{gb:,.1f} GB" if gb >= 1 else f"{b / 1e6:,.1f} MB"


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:,.1f} s"
    if s < 7200:
        return f"{s / 60:,.0f} min"
    if s < 172800:
        return f"{s / 3600:,.1f} h"
    return f"{s / 86400:,.1f} d"


def plan_tables(rows: list[dict[str, Any]], retriever: str, dim_source: str) -> list[Any]:
    """Rich tables of `plan` rows: sizes, then machine needs, times and the fitting setting."""
    from rich.table import Table

    dense = any(r.get("dim") for r in rows)
    dim = next((r["dim"] for r in rows if r.get("dim")), None)
    box = rows[0]["machine"] if rows else {}
    sizes_t = Table(
        title=f"Storage: retriever={retriever}, dim {dim or '-'} ({dim_source}); 1 GB = 1e9 B"
    )
    for col in ("corpus", "granularity", "# units", "B/unit", "units"):
        sizes_t.add_column(col, justify="left" if col in ("corpus", "granularity") else "right")
    if dense:
        for col in ("emb fp32", "emb fp16", "Flat fp32", "Flat fp16", "IVF-PQ (nlist)"):
            sizes_t.add_column(col, justify="right")
    for r in rows:
        cells = [r["corpus"], r["granularity"], f"{r['units']:,}", f"{r['bytes_per_unit']:,.0f}",
                 _gb(r["units_bytes"])]  # fmt: skip
        if dense:
            cells += [_gb(r["emb_fp32_bytes"]), _gb(r["emb_fp16_bytes"]), _gb(r["flat_fp32_bytes"]),
                      _gb(r["flat_fp16_bytes"]), f"{_gb(r['ivfpq_bytes'])} ({r['nlist']:,})"]  # fmt: skip
        sizes_t.add_row(*cells)
    if not dense:
        return [sizes_t]
    gpus = rows[0]["gpus"]
    gpu_note = "" if box.get("gpus") else f" (none here: {gpus} x {box['gpu_mem_gb']:.0f} GB shown)"
    need = Table(
        title=(
            f"Machine: {box['ram_gb']:.0f} GB RAM, {box['disk_gb']:.0f} GB free disk,"
            f" {box.get('gpus', 0)} GPUs{gpu_note}; memory budget"
            f" {rows[0]['memory_budget_gb']:g} GB/shard; {box['queries']:,} queries"
        )
    )
    for col in ("corpus", "granularity", "disk", "RAM whole", "mmap shards (RAM)",
                f"GPU/{gpus} fp32|fp16|PQ", "encode", "search CPU|GPU|PQ", "fits this machine"):  # fmt: skip
        left = col in ("corpus", "granularity", "fits this machine")
        need.add_column(col, justify="left" if left else "right")
    for r in rows:
        encode = f"{_dur(r['encode_gpu_s'])} ({r['encode_on']})"
        if r.get("encode_here_s") is not None:
            encode += f" ({_dur(r['encode_here_s'])} here)"
        need.add_row(
            r["corpus"],
            r["granularity"],
            _gb(r["disk_total_bytes"]),
            _gb(r["ram_whole_bytes"]),
            f"{r['shards']:,} ({_gb(r['ram_mmap_bytes'])})",
            f"{_gb(r['gpu_fp32_bytes'])}|{_gb(r['gpu_fp16_bytes'])}|{_gb(r['gpu_ivfpq_bytes'])}",
            encode,
            f"{_dur(r['search_cpu_s'])}|{_dur(r['search_gpu_s'])}|{_dur(r['search_ivfpq_s'])}",
            r["fits"],
        )
    return [sizes_t, need]


def notes(rows: list[dict[str, Any]]) -> list[str]:
    """The sources and assumptions behind the numbers, one line each."""
    if not rows:
        return []
    out = [f"{r['corpus']}/{r['granularity']}: count and bytes/unit from {r['count_source']}"
           for r in rows]  # fmt: skip
    measured = rows[0].get("measured")
    if measured:
        out.append(
            f"encode here: {measured['units_per_second']:,.1f} units/s measured"
            f" ({measured['encoded']:,} units, {measured['processes']} process(es),"
            f" {measured['path']})"
        )
    else:
        out.append("encode here: no embeddings manifest of this retriever in paths.cache_dir")
    if rows[0].get("dim"):
        out += [
            "disk = units + fp16 embedding shards + the Flat fp32 index; RAM whole = the fp32"
            " index + 8 B/unit passage rows; mmap = one shard of index.memory_budget_gb + rows",
            "encode on GPUs: assumed A100 bf16 throughput (~3,000 units/s for a 110M-parameter"
            " encoder at 128 tokens, scaled by tokens/unit); index.py stage=embed measures it",
            f"search CPU: max(read the fp32 index from disk at {DISK_BYTES_PER_SECOND / GB:g} GB/s"
            f" (assumed), 2*q*n*d FLOP at {rows[0]['cpu_flops'] / 1e9:,.1f} GFLOP/s measured here)",
            f"search GPU: Flat fp16 at {GPU_FLOPS_FP16 / 1e12:g} TFLOP/s per GPU (assumed);"
            f" PQ: IVF{{nlist}},PQ{PQ_M} ({PQ_M} B code + 8 B id per vector), nprobe lists"
            f" scanned at {PQ_LOOKUPS_PER_SECOND_PER_CORE / 1e9:g}G lookups/s/core (assumed)",
            "IVF-PQ training needs >= 39*nlist vectors: set index.train_size accordingly",
        ]
    return out


def print_plan(rows: list[dict[str, Any]], retriever: str, dim_source: str) -> str:
    """Log the plan tables and notes; return the text that was logged."""
    text = "\n".join(render(t) for t in plan_tables(rows, retriever, dim_source))
    text += "\n" + "\n".join(f"- {line}" for line in notes(rows))
    log.info("plan (nothing was run)\n%s", text)
    return text


def run_plan(cfg: DictConfig) -> list[dict[str, Any]]:
    """`index.py stage=plan`: compute and print the plan; return its rows."""
    rows = plan(cfg)
    _, dim_source = retriever_dim(cfg.retriever)
    print_plan(rows, str(cfg.retriever.get("name")), dim_source)
    return rows
