"""`data.sources` typed at the edge: the config's list of teacher-pair sources as
`propositionizer.sources.PairSource`s, for the data module, the retrieval validation callback
and the scripts that split the articles as train.py does (`scripts/heldout_split.py`,
`scripts/copy_shortlist.py`). Imports no torch: scripts stay quick to start.
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import OmegaConf

from densex.propositionizer.sources import PairSource

__all__ = ["config_sources", "pair_sources"]


def pair_sources(nodes: Any) -> list[PairSource] | None:
    """`data.sources` (a list of mappings, resolved) as typed `PairSource`s; None for none. A
    missing or unknown key is a ValueError naming the entry."""
    if not nodes:
        return None
    plain = OmegaConf.to_container(nodes, resolve=True) if OmegaConf.is_config(nodes) else nodes
    out = []
    for i, node in enumerate(plain):
        try:
            out.append(PairSource(**node))
        except TypeError as e:
            raise ValueError(f"data.sources[{i}]: {e}") from None
    return out


def config_sources(config: str | os.PathLike, data_dir: str | os.PathLike) -> list[PairSource]:
    """The `sources` of a data config file (`conf/data/squad-sources.yaml`) with
    `${paths.data_dir}` as `data_dir`: what scripts read to split the articles as train.py does."""
    paths = {"paths": {"data_dir": str(data_dir)}}
    node = OmegaConf.merge(paths, {"s": OmegaConf.load(config).sources})
    return pair_sources(node.s) or []
