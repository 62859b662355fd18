"""Build the cached artifacts of one (corpus, granularity, retriever), stage by stage.

    stage=units         corpus -> passages + passage/sentence/proposition units; prints Table 1
    stage=propositions  passages -> propositions with `propositionizer=` (not `file`), then units
    stage=embed|index   units -> embeddings -> faiss index (both cached by content hash)
    stage=all           everything above, in order

Every artifact lands under `paths.cache_dir`, keyed by content, where `evaluate.py` finds it:
running this first is optional (evaluate builds what is missing) but lets a cluster build
indexes once, before a sweep fans out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from densex.corpus.units import print_unit_table, unit_stats
from densex.pipelines.edge import cache_spec, index_spec, retriever_spec, trainer_args
from densex.pipelines.index.units import build_corpus_units, generates_propositions, unit_file
from densex.retrieval.spec import RetrieverSpec
from densex.utils.distributed import global_rank
from densex.utils.integrity import configure
from densex.utils.io import disk_full_reported
from densex.utils.logging import get_logger

log = get_logger(__name__)

STAGES = ("units", "propositions", "embed", "index", "all", "plan")


def print_unit_stats(files: Any, corpus: str) -> None:

    print_unit_table(unit_stats(files), title=f"Retrieval units of {corpus} (cf. Table 1)")
    log.info("units in %s", files.out_dir)


def run(cfg: DictConfig) -> None:
    """Run `cfg.stage` (and the stages it needs)."""
    configure(cache_spec(cfg.get("cache")))  # verification / shard-size policy for this process
    stage = str(cfg.get("stage", "all"))
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    if stage == "plan":  # the budget only: nothing is read beyond samples, nothing built
        from densex.pipelines.plan.run import run_plan  # the planner probes this machine's BLAS

        run_plan(cfg)
        return None
    # a full disk ends in one line: the file, the planner's estimate and the space free
    with disk_full_reported(cfg.paths.cache_dir, lambda: _planned_bytes(cfg)):
        _run_stages(cfg, stage)
    return None


def _planned_bytes(cfg: DictConfig) -> int | None:
    """The planner's estimate of this (corpus, granularity)'s cache artifacts."""
    from densex.pipelines.plan.run import planned_disk_bytes  # torch: only when the disk is full

    return planned_disk_bytes(cfg)


def _run_stages(cfg: DictConfig, stage: str) -> None:
    """The artifacts of `stage` (and the stages it needs), built or reused."""
    files = build_corpus_units(cfg, with_generated=generates_propositions(cfg))
    print_unit_stats(files, str(cfg.corpus.get("name", "corpus")))
    if stage in ("units", "propositions"):
        return None

    units_path = unit_file(files, str(cfg.granularity.name))
    if stage == "embed":
        embed_units(cfg, units_path)
        return None
    # retrieval (torch, faiss) loads only for stage=embed|index|all, not for units or plan
    from densex.retrieval.build import load_or_build_searcher

    searcher = load_or_build_searcher(
        units_path, retriever_spec(cfg.retriever), index_spec(cfg.index), cfg.paths.cache_dir,
        trainer_args(cfg),
    )  # fmt: skip
    if global_rank() != 0:  # ddp (not spawn): every rank encoded its share; rank 0 reports
        return None
    log.info(
        "index ready: %d %s units (%s)", searcher.ntotal, cfg.granularity.name, cfg.retriever.name
    )
    return None


def embed_units(cfg: DictConfig, units_path: Path) -> Path | None:
    """Only the (resumable, cached) unit embeddings, in the directory the index stage reads."""
    # torch loads only for the embed stage
    from densex.retrieval.build import default_shard_size, embeddings_dir
    from densex.retrieval.encode import encode_units_to_dir

    if cfg.retriever.get("type", "dense") == "sparse":
        log.info(
            "retriever %s is sparse: nothing to embed (stage=index builds it)", cfg.retriever.name
        )
        return None
    spec = RetrieverSpec.from_cfg(cfg.retriever)
    shard_size = default_shard_size(units_path)
    emb_dir = embeddings_dir(units_path, spec, cfg.paths.cache_dir, shard_size)
    # reuses a verified complete dir, resumes a partial one, re-encodes damaged shards
    store = encode_units_to_dir(units_path, spec, emb_dir, trainer_args(cfg), shard_size=shard_size)
    if store.reused:
        log.info("embeddings cached at %s", emb_dir)
    return emb_dir
