"""Fused cells of a sweep: `granularity=mixed` and `fusion=rrf` / `fusion=hybrid`.

Both are ordinary evaluate cells: the same run-dir files and metrics as any other, computed
from a combined units table (the member granularities' units files, concatenated in order).

- `granularity=mixed` (`members: [passage, sentence, proposition]`): one searcher over the
  union of the member unit indexes (`analysis.fusion.UnionSearcher`, exact, each member's
  cached embeddings and index reused); a passage scores the max over all its units.
- `fusion=rrf` (`fusion.members`: a list of `{granularity, retriever}` overrides of the cell,
  null = the cell's own): each member cell retrieves `fusion.depth` passages (and the units
  QA reads), and the passage and unit rankings are fused by reciprocal rank fusion
  (`fusion.k`, 60). `fusion=rrf` fuses the three granularities, `fusion=hybrid` the cell's
  dense retriever with BM25.
The row's labels say what was fused: granularity `rrf:passage+sentence+proposition`,
retriever `minilm+bm25`, and `fusion: rrf`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from densex.analysis.fusion import UnionSearcher, fuse_retrievals
from densex.pipelines.edge import index_spec, retriever_spec, trainer_args
from densex.pipelines.index.units import unit_file
from densex.retrieval.build import load_or_build_searcher, share_query_encoders
from densex.retrieval.search import fetch_units_for_words, retrieve_passages
from densex.utils.distributed import global_rank
from densex.utils.io import DataError, atomic_open
from densex.utils.logging import get_logger

log = get_logger(__name__)


@dataclass
class Member:
    """One member cell of a fusion: its granularity, retriever config and searcher."""

    granularity: str
    retriever: Any
    searcher: Any = None
    offset: int = 0  # its first unit row in the combined units table


def _members_cfg(cfg: DictConfig) -> list[tuple[str, Any]]:
    """(granularity, retriever config) per fusion member; [] for an unfused cell."""
    fusion = cfg.get("fusion")
    if fusion and fusion.get("members"):
        out = []
        for m in fusion.members:
            g = (m.get("granularity") if m else None) or str(cfg.granularity.name)
            r = (m.get("retriever") if m else None) or cfg.retriever
            out.append((str(g), r))
        return out
    grans = cfg.granularity.get("members")
    return [(str(g), cfg.retriever) for g in grans] if grans else []


def is_rrf(cfg: DictConfig) -> bool:
    fusion = cfg.get("fusion")
    return bool(fusion and fusion.get("members"))


def is_fused(cfg: DictConfig) -> bool:
    """A `granularity=mixed`-style cell or an RRF cell."""
    return bool(_members_cfg(cfg))


def unit_granularities(cfg: DictConfig) -> list[str]:
    """The distinct member granularities, in order (the combined units table's parts)."""
    return list(dict.fromkeys(g for g, _ in _members_cfg(cfg)))


def fusion_keys(cfg: DictConfig) -> dict[str, Any]:
    """Row labels of a fused cell (see the module doc); {} for an ordinary cell."""
    if not is_rrf(cfg):
        return {}
    members = _members_cfg(cfg)
    grans = list(dict.fromkeys(g for g, _ in members))
    rets = list(dict.fromkeys(str(_name(r)) for _, r in members))
    keys: dict[str, Any] = {"fusion": str(cfg.fusion.name)}
    keys["granularity"] = "rrf:" + "+".join(grans) if len(grans) > 1 else grans[0]
    if len(rets) > 1:
        keys["retriever"] = "+".join(rets)
    return keys


def _name(retriever_cfg: Any) -> str:
    return str(retriever_cfg.get("name")) if hasattr(retriever_cfg, "get") else str(retriever_cfg)


def combined_units_file(unit_files: Any, granularities: Sequence[str]) -> Path:
    """The member granularities' units files concatenated (written once beside them)."""
    parts = [Path(unit_files[g]) for g in granularities]
    if len(parts) == 1:
        return parts[0]
    out = Path(unit_files.out_dir) / ("+".join(granularities) + ".jsonl")
    newest = max(p.stat().st_mtime for p in parts)
    if not out.exists() or out.stat().st_mtime < newest:
        with atomic_open(out) as f:
            for p in parts:
                with p.open(encoding="utf-8") as src:
                    for line in src:
                        if line.strip():
                            f.write(line if line.endswith("\n") else line + "\n")
    return out


def cell_units_file(cfg: DictConfig, unit_files: Any) -> Path:
    """The units file a cell searches: its granularity's, or the fused members' combined."""

    grans = unit_granularities(cfg)
    if not grans:
        return unit_file(unit_files, str(cfg.granularity.name))
    try:
        return combined_units_file(unit_files, grans)
    except KeyError as e:
        raise DataError(unit_files.manifest, None, "granularity", str(e.args[0])) from e


def cell_searcher(cfg: DictConfig, unit_files: Any, units_path: Path) -> Any:
    """The cell's searcher: a plain cached searcher, a `UnionSearcher` (mixed) or, for RRF,
    a `FusionMembers` holding each member's searcher."""

    cache_dir = Path(cfg.paths.cache_dir)
    members = _members_cfg(cfg)
    if not members:
        return load_or_build_searcher(
            units_path,
            retriever_spec(cfg.retriever),
            index_spec(cfg.index),
            cache_dir,
            trainer_args(cfg),
        )
    grans = unit_granularities(cfg)
    sizes: dict[str, int] = {}
    built: list[Member] = []
    cache: dict[tuple[str, str], Any] = {}
    for g, r in members:
        rc = OmegaConf.to_container(r, resolve=True) if isinstance(r, DictConfig) else r
        key = (g, repr(rc))
        if key not in cache:
            cache[key] = load_or_build_searcher(
                unit_files[g],
                retriever_spec(rc),
                index_spec(cfg.index),
                cache_dir,
                trainer_args(cfg),
            )
        s = cache[key]
        sizes[g] = int(s.ntotal)
        built.append(Member(g, rc, s))
    share_query_encoders(m.searcher for m in built)  # the members' retriever: one model
    offsets = np.cumsum([0] + [sizes[g] for g in grans])
    for m in built:
        m.offset = int(offsets[grans.index(m.granularity)])
    if global_rank() != 0:  # ddp: this rank took part in encoding; rank 0 searches
        return built[0].searcher
    if not is_rrf(cfg):
        return UnionSearcher([m.searcher for m in built])
    return FusionMembers(built, grans)


class FusionMembers:
    """The members of an RRF cell; `unit_ids` are the combined units table's ids."""

    def __init__(self, members: list[Member], granularities: list[str]) -> None:
        self.members = members
        first = {}
        for m in members:
            first.setdefault(m.granularity, m.searcher)
        self.unit_ids = [u for g in granularities for u in first[g].unit_ids]
        self.info = {"members": [getattr(m.searcher, "info", {}) for m in members]}

    @property
    def ntotal(self) -> int:
        return len(self.unit_ids)


def fused_retrieval(
    cfg: DictConfig,
    members: FusionMembers,
    queries: list[str],
    unit_passage_rows: np.ndarray,
    unit_words: np.ndarray,
    k: int,
    need_words: int,
) -> list[Any]:
    """Each member retrieves `max(k, fusion.depth)` passages and the units covering
    `need_words` words; the rankings are fused by RRF (passages cut to k)."""

    depth = max(k, int(cfg.fusion.depth))
    per_member = []
    for m in members.members:
        n = int(m.searcher.ntotal)
        rows = unit_passage_rows[m.offset : m.offset + n]
        words = unit_words[m.offset : m.offset + n]
        ratio = int(np.ceil(n / max(1, len(np.unique(rows)))))
        avg = max(1.0, float(words.mean())) if n else 1.0
        n_start = max(depth * ratio + 1, int(np.ceil(need_words / avg)) + 1)
        res = retrieve_passages(m.searcher, queries, rows, depth, n_start=n_start)
        fetch_units_for_words(m.searcher, queries, res, words, need_words)
        per_member.append(res)
        log.info("fusion member %s/%s: %d questions", _name(m.retriever), m.granularity, len(res))
    return fuse_retrievals(per_member, int(cfg.fusion.k), k, [m.offset for m in members.members])
