"""`index.py stage=plan`: what each stage will need (disk, RAM, GPU memory, time) before anything
runs, for the configured corpus and for FactoidWiki (the paper's Table 1), and which index /
shard settings fit a machine.

Nothing is built, downloaded or loaded: counts come from the configured corpus's files
(`plan/counts`: its units cache, or a sample of its input files) or from `expected_units`
(Table 1 for `corpus=factoid-wiki`); the embedding dimension, the machine and measured
throughputs from `plan/machine`; sizes, needs and times from the size model (`plan/sizes`);
the printed tables from `plan/tables`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig

from densex.pipelines.plan.counts import corpus_units, sampled_bytes_per_word
from densex.pipelines.plan.machine import (
    cpu_flops,
    machine,
    measured_passages_per_second,
    measured_units_per_second,
    retriever_dim,
)
from densex.pipelines.plan.sizes import FACTOID_WIKI, UNIT_OVERHEAD_BYTES, plan_rows
from densex.pipelines.plan.tables import print_plan
from densex.retrieval.spec import IndexSpec
from densex.utils.config import plain_data

__all__ = ["plan", "planned_disk_bytes", "run_plan"]


def factoid_wiki_units(corpus: Mapping[str, Any]) -> dict[str, dict]:
    """Table 1's counts and words per unit, with bytes per word sampled from `corpus`'s text
    (else assumed): the `corpus_units` rows of FactoidWiki."""
    bpw, src = sampled_bytes_per_word(corpus)
    return {
        g: {
            "count": n,
            "avg_words": w,
            "bytes_per_unit": UNIT_OVERHEAD_BYTES + bpw * w,
            "source": f"Table 1; bytes/word {src}",
        }  # fmt: skip
        for g, (n, w) in FACTOID_WIKI.items()
    }


def plan(cfg: DictConfig | Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows (one per corpus x granularity) of the budget of this config's corpus and of
    FactoidWiki at the retriever's dimension, for the machine of `plan.*`; no network, nothing
    built. Keys: corpus, granularity, units, count_source, bytes_per_unit, dim, *_bytes sizes
    (units, emb_fp32/fp16, flat_fp32/fp16, ivfpq, ram_whole, ram_mmap, gpu_*, disk_total),
    nlist, shards, gpus, encode_gpu_s, encode_here_s (when measured), search_*_s, fits, and
    on proposition rows propositionize_here_s (the corpus's passages at the measured rate of
    the proposition stage, `measured_passages_per_second`)."""
    retriever = dict(plain_data(cfg["retriever"]) or {})
    dim, _ = retriever_dim(retriever)
    cache_dir = str(cfg["paths"]["cache_dir"])
    box = machine(cfg.get("plan"), cache_dir)
    index_cfg = dict(plain_data(cfg.get("index")) or {})
    budget = float(index_cfg.get("memory_budget_gb") or IndexSpec.memory_budget_gb)
    nprobe = int((index_cfg.get("params") or {}).get("nprobe") or 32)
    measured = measured_units_per_second(cache_dir, str(retriever.get("name")))
    flops = cpu_flops() if dim is not None else 1.0
    corpus = dict(plain_data(cfg["corpus"]) or {})
    label = str(corpus.get("name") or "corpus")
    rows = plan_rows(label, corpus_units(corpus, cache_dir), retriever, dim, box, budget,
                     measured, flops, nprobe)  # fmt: skip
    if label != "factoid-wiki":
        rows += plan_rows("factoid-wiki", factoid_wiki_units(corpus), retriever, dim, box,
                          budget, measured, flops, nprobe)  # fmt: skip
    propositions = measured_passages_per_second(cache_dir)
    for row in rows:
        row["machine"] = box
        row["memory_budget_gb"] = budget
        row["cpu_flops"] = flops
        row["measured"] = measured
        row["propositions_measured"] = propositions
    if propositions:
        passages = {r["corpus"]: r["units"] for r in rows if r["granularity"] == "passage"}
        for row in rows:
            if row["granularity"] == "proposition" and row["corpus"] in passages:
                rate = propositions["passages_per_second"]
                row["propositionize_here_s"] = passages[row["corpus"]] / rate
    return rows


def run_plan(cfg: DictConfig) -> list[dict[str, Any]]:
    """`index.py stage=plan`: compute and print the plan; return its rows."""
    rows = plan(cfg)
    _, dim_source = retriever_dim(cfg.retriever)
    print_plan(rows, str(cfg.retriever.get("name")), dim_source)
    return rows


def planned_disk_bytes(cfg: DictConfig) -> int | None:
    """The planner's estimate of the cache bytes a cell of cfg needs: the units of every
    granularity the corpus builds (the units stage writes them all) + the cell granularity's
    fp16 embeddings and exact fp32 index (its `disk_total_bytes` is units + those two; units
    alone for BM25); None for a granularity the planner has no row for (a fused cell)."""
    label = str(cfg.corpus.get("name") or "corpus")
    rows = [row for row in plan(cfg) if row["corpus"] == label]
    cell = [row for row in rows if row["granularity"] == str(cfg.granularity.name)]
    if not cell:
        return None
    others = sum(row["units_bytes"] for row in rows if row is not cell[0])
    return int(cell[0]["disk_total_bytes"] + others)
