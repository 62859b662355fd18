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

from densex.corpus.units import build_units, print_unit_table, unit_stats
from densex.corpus.units_key import units_dir_for
from densex.propositionizer.output import manifest_path
from densex.retrieval.spec import RetrieverSpec
from densex.utils.cache import artifact_dir, content_key, hash_file
from densex.utils.distributed import global_rank
from densex.utils.integrity import configure, handle_damage, remove_orphans, verify_files
from densex.utils.io import DataError, read_json
from densex.utils.logging import get_logger
from densex.utils.models import resolve_model

log = get_logger(__name__)

STAGES = ("units", "propositions", "embed", "index", "all", "plan")


def propositions_key(cfg: DictConfig, passages_path: Path) -> str:
    """Cache key of generated propositions: the passages, the settings, and the content behind
    them that a path string hides: the model checkpoint's files (the fingerprint
    `model_backend.py` keys its shards with) and the teacher's prompt template (sha256)."""
    # the propositionizer (transformers) loads only when propositions are generated
    from densex.propositionizer.fingerprint import effective_dtype, model_fingerprint

    settings = OmegaConf.to_container(cfg.propositionizer, resolve=True)
    ptype = str(settings.get("type", "model"))
    content: dict[str, Any] = {}
    if ptype == "model" and settings.get("model") not in (None, "???"):
        content["model"] = model_fingerprint(resolve_model(str(settings["model"])))
        # `auto` means bf16 on a GPU and fp32 on CPU: key by what generation really runs in
        content["dtype"] = effective_dtype(str(settings.get("dtype", "auto")), cfg.get("trainer"))
    if ptype == "teacher" or settings.get("prompt"):
        prompt = settings.get("prompt")
        if not prompt:
            from densex.propositionizer.prompt import default_prompt_path  # as above

            prompt = default_prompt_path()
        if Path(prompt).is_file():
            content["prompt_sha256"] = hash_file(prompt)
    return content_key(passages=hash_file(passages_path), propositionizer=settings, **content)


def generated_propositions_path(cfg: DictConfig, passages_path: Path) -> Path:
    """Where `generated_propositions` writes (and later finds) the propositions of
    `passages_path` under cfg.propositionizer; nothing is generated."""
    key = propositions_key(cfg, passages_path)
    out = artifact_dir(
        cfg.paths.cache_dir, "propositions", str(cfg.propositionizer.get("name", "model")), key=key
    )
    return out / "propositions.jsonl"


def generated_propositions(cfg: DictConfig, passages_path: Path) -> Path:
    """Run the configured propositionizer over the passages, cached by `propositions_key`
    (passages, settings, model files, prompt), so a retrained model exported to the same dir
    or an edited prompt generates afresh."""
    from densex.propositionizer.generate import generate_propositions  # transformers

    path = generated_propositions_path(cfg, passages_path)
    remove_orphans(path.parent)
    if path.exists() and _propositions_intact(path):
        log.info("propositions cached at %s", path)
        return path
    # ddp: every rank generates its shards, rank 0 merges; all return after the merge (barrier)
    generate_propositions(passages_path, cfg.propositionizer, path, cfg.get("trainer"))
    return path


def _propositions_intact(path: Path) -> bool:
    """Whether a cached propositions file matches the size + hash its manifest recorded;
    damaged (or unrecorded) ones are reported and regenerated (`cache.on_damaged`)."""

    try:
        record = read_json(manifest_path(path)).get("file")
    except DataError:
        record = None
    problems = verify_files(path.parent, {path.name: record})
    return not handle_damage(problems, "propositions", f"rebuild: rm -r {path.parent}")


def build_corpus_units(cfg: DictConfig, with_generated: bool) -> Any:
    """`build_units` for cfg.corpus; with a model propositionizer, on its propositions."""

    cache_dir = Path(cfg.paths.cache_dir)
    files = build_units(cfg.corpus, units_dir_for(cfg.corpus, cache_dir))
    if with_generated:
        props = generated_propositions(cfg, Path(files.passages))
        out_dir = units_dir_for(cfg.corpus, cache_dir, propositions_path=props)
        files = build_units(cfg.corpus, out_dir, propositions_path=props)
    return files


def print_unit_stats(files: Any, corpus: str) -> None:

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
    configure(cfg.get("cache"))  # verification / shard-size policy for this process
    stage = str(cfg.get("stage", "all"))
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    if stage == "plan":  # the budget only: nothing is read beyond samples, nothing built
        from densex.pipelines.plan import run_plan  # the planner probes this machine's BLAS

        run_plan(cfg)
        return None
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
        units_path, cfg.retriever, cfg.index, cfg.paths.cache_dir, cfg.get("trainer")
    )
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
    store = encode_units_to_dir(
        units_path, spec, emb_dir, cfg.get("trainer"), shard_size=shard_size
    )
    if store.reused:
        log.info("embeddings cached at %s", emb_dir)
    return emb_dir


def unit_file(unit_files: Any, granularity: str) -> Path:
    """The units file of one granularity from `build_units`' result, or a located DataError."""
    try:
        return Path(unit_files[granularity])
    except KeyError as e:
        raise DataError(unit_files.manifest, None, "granularity", str(e.args[0])) from e
