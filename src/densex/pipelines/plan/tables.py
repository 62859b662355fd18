"""The printed form of `index.py stage=plan`: rich tables of the plan rows and the notes on
where each number came from.

Contract: `plan_tables(rows, retriever, dim_source)` -> [storage table] (+ [machine needs
table] for a dense retriever); `notes(rows)` -> one line per source or assumption;
`print_plan` logs both (under the `densex.pipelines.plan.run` logger, the stage's name) and
returns the text.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from densex.pipelines.plan.sizes import (
    DISK_BYTES_PER_SECOND,
    GB,
    GPU_FLOPS_FP16,
    PQ_LOOKUPS_PER_SECOND_PER_CORE,
    PQ_M,
)
from densex.utils.logging import get_logger, render

log = get_logger("densex.pipelines.plan.run")  # the stage's log lines keep its name


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


def storage_table(rows: list[dict[str, Any]], retriever: str, dim_source: str) -> Table:
    """Sizes of each (corpus, granularity): units, and for a dense retriever the embeddings
    and the Flat / IVF-PQ indexes."""
    dense = any(r.get("dim") for r in rows)
    dim = next((r["dim"] for r in rows if r.get("dim")), None)
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
    return sizes_t


def needs_table(rows: list[dict[str, Any]]) -> Table:
    """Disk, RAM, GPU memory, encode and search times of each dense row, and the index setting
    that fits the planned machine (`rows` non-empty, with a dimension)."""
    box = rows[0]["machine"] if rows else {}
    gpus = rows[0]["gpus"]
    gpu_note = "" if box.get("gpus") else f" (none here: {gpus} x {box['gpu_mem_gb']:.0f} GB shown)"
    need = Table(
        title=(
            f"Machine: {box['ram_gb']:.0f} GB RAM, {box['disk_gb']:.0f} GB free disk,"
            f" {box.get('gpus', 0)} GPUs{gpu_note}; memory budget"
            f" {rows[0]['memory_budget_gb']:g} GB/shard; {box['queries']:,} queries"
        )
    )
    for col in ("corpus", "granularity", "disk", "RAM whole", "mmap shards (RAM)", "build RAM",
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
            _gb(r["ram_build_bytes"]),
            f"{_gb(r['gpu_fp32_bytes'])}|{_gb(r['gpu_fp16_bytes'])}|{_gb(r['gpu_ivfpq_bytes'])}",
            encode,
            f"{_dur(r['search_cpu_s'])}|{_dur(r['search_gpu_s'])}|{_dur(r['search_ivfpq_s'])}",
            r["fits"],
        )
    return need


def plan_tables(rows: list[dict[str, Any]], retriever: str, dim_source: str) -> list[Any]:
    """Rich tables of `plan` rows: sizes, then machine needs, times and the fitting setting."""
    sizes_t = storage_table(rows, retriever, dim_source)
    if not any(r.get("dim") for r in rows):
        return [sizes_t]
    return [sizes_t, needs_table(rows)]


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
    out.append(_propositions_note(rows))
    if rows[0].get("dim"):
        out += [
            "disk = units + fp16 embedding shards + the Flat fp32 index; RAM whole = the fp32"
            " index + 8 B/unit passage rows; mmap = one shard of index.memory_budget_gb + rows;"
            " build = one shard (pre-sized, filled in place) + a 65,536-row fp32 block + rows",
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


def _propositions_note(rows: list[dict[str, Any]]) -> str:
    """The proposition stage's time at the measured rate, per corpus (100 nodes beside)."""
    measured = rows[0].get("propositions_measured")
    if not measured:
        return (
            "propositionize here: no rate measured (a generated propositions manifest or"
            " benchmarks/propositionizer_speed.py's record in paths.cache_dir)"
        )
    times = [
        f"{r['corpus']} {_dur(r['propositionize_here_s'])}"
        f" ({_dur(r['propositionize_here_s'] / 100)} on 100 nodes)"
        for r in rows
        if r.get("propositionize_here_s") is not None
    ]
    return (
        f"propositionize here: {measured['passages_per_second']:,.2f} passages/s measured"
        f" ({measured['source']}): " + "; ".join(times)
    )


def print_plan(rows: list[dict[str, Any]], retriever: str, dim_source: str) -> str:
    """Log the plan tables and notes; return the text that was logged."""
    text = "\n".join(render(t) for t in plan_tables(rows, retriever, dim_source))
    text += "\n" + "\n".join(f"- {line}" for line in notes(rows))
    log.info("plan (nothing was run)\n%s", text)
    return text
