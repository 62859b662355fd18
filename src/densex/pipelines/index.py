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

from omegaconf import DictConfig, OmegaConf

from densex.utils.cache import artifact_dir, content_key, hash_file
from densex.utils.logging import get_logger

log = get_logger(__name__)

STAGES = ("units", "propositions", "embed", "index", "all")


def generated_propositions(cfg: DictConfig, passages_path: Path) -> Path:
    """Run the configured propositionizer over the passages (cached by passages + settings)."""
    from densex.propositionizer.generate import generate_propositions

    settings = OmegaConf.to_container(cfg.propositionizer, resolve=True)
    key = content_key(passages=hash_file(passages_path), propositionizer=settings)
    out = artifact_dir(
        cfg.paths.cache_dir, "propositions", str(cfg.propositionizer.get("name", "model")), key=key
    )
    path = out / "propositions.jsonl"
    if path.exists():
        log.info("propositions cached at %s", path)
        return path
    generate_propositions(passages_path, cfg.propositionizer, path, cfg.get("trainer"))
    return path


def build_corpus_units(cfg: DictConfig, with_generated: bool) -> Any:
    """`build_units` for cfg.corpus; with a model propositionizer, on its propositions."""
    from densex.corpus.units import build_units, units_dir_for

    cache_dir = Path(cfg.paths.cache_dir)
    files = build_units(cfg.corpus, units_dir_for(cfg.corpus, cache_dir))
    if with_generated:
        props = generated_propositions(cfg, Path(files.passages))
        out_dir = units_dir_for(cfg.corpus, cache_dir, propositions_path=props)
        files = build_units(cfg.corpus, out_dir, propositions_path=props)
    return files


def print_unit_stats(files: Any, corpus: str) -> None:
    from densex.corpus.units import print_unit_table, unit_stats

    print_unit_table(unit_stats(files), title=f"Retrieval units of {corpus} (cf. Table 1)")
    log.info("units in %s", files.out_dir)


def generates_propositions(cfg: DictConfig) -> bool:
    """True when proposition units must come from a model (`propositionizer=` other than file):
    for index.py stage=propositions|all, and whenever the granularity is proposition."""
    ptype = str((cfg.get("propositionizer") or {}).get("type", "file"))
    stage = cfg.get("stage")  # None in evaluate.py
    return ptype != "file" and (
        stage in ("propositions", "all") or cfg.granularity.name == "proposition"
    )


def run(cfg: DictConfig) -> None:
    """Run `cfg.stage` (and the stages it needs)."""
    stage = str(cfg.get("stage", "all"))
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    files = build_corpus_units(cfg, with_generated=generates_propositions(cfg))
    print_unit_stats(files, str(cfg.corpus.get("name", "corpus")))
    if stage in ("units", "propositions"):
        return None

    from densex.pipelines.evaluate import unit_file

    units_path = unit_file(files, str(cfg.granularity.name))
    if stage == "embed":
        embed_units(cfg, units_path)
        return None
    from densex.retrieval.build import load_or_build_searcher

    searcher = load_or_build_searcher(
        units_path, cfg.retriever, cfg.index, cfg.paths.cache_dir, cfg.get("trainer")
    )
    log.info(
        "index ready: %d %s units (%s)", searcher.ntotal, cfg.granularity.name, cfg.retriever.name
    )
    return None


def embed_units(cfg: DictConfig, units_path: Path) -> Path | None:
    """Only the (resumable, cached) unit embeddings, in the directory the index stage reads."""
    from densex.retrieval.build import embeddings_dir
    from densex.retrieval.encode import encode_units_to_dir
    from densex.retrieval.encoders import RetrieverSpec

    if cfg.retriever.get("type", "dense") == "sparse":
        log.info(
            "retriever %s is sparse: nothing to embed (stage=index builds it)", cfg.retriever.name
        )
        return None
    spec = RetrieverSpec.from_cfg(cfg.retriever)
    emb_dir = embeddings_dir(units_path, spec, cfg.paths.cache_dir)
    if (emb_dir / "manifest.json").exists():
        log.info("embeddings cached at %s", emb_dir)
    else:
        encode_units_to_dir(units_path, spec, emb_dir, cfg.get("trainer"))
    return emb_dir
