"""The config tree turned into what the layers below `pipelines/` take: typed specs and plain
values, once per entry (docs/architecture.md, "Typed at the edge").

`corpus_spec`, `retriever_spec`, `index_spec`, `cache_spec`, `dataset_spec`: a group's node
as its schema object; `trainer_args`: the `trainer` group's plain values for the predict
trainers of encoding and generation; `propositionizer_settings`: the propositionizer group's
settings dataclass for its `type`.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from densex.corpus.spec import CorpusSpec
from densex.data.spec import DatasetSpec
from densex.propositionizer.settings import ModelSettings, PropositionizerSettings, TeacherSettings

# `retriever_spec(cfg.retriever)`: a `BM25Spec` for `type: sparse`, else a `RetrieverSpec`
from densex.retrieval.spec import IndexSpec, retriever_spec
from densex.utils.config import ConfigNode, from_config, plain_settings, to_spec
from densex.utils.integrity import CacheSpec

__all__ = [
    "cache_spec",
    "corpus_spec",
    "dataset_spec",
    "index_spec",
    "propositionizer_settings",
    "retriever_spec",
    "trainer_args",
]


def corpus_spec(node: ConfigNode | CorpusSpec) -> CorpusSpec:
    """`cfg.corpus` as its `CorpusSpec` (paths resolved)."""
    return to_spec(CorpusSpec, node)


def dataset_spec(node: ConfigNode | DatasetSpec) -> DatasetSpec:
    """`cfg.dataset` as its `DatasetSpec` (paths resolved)."""
    return to_spec(DatasetSpec, node)


def index_spec(node: ConfigNode | IndexSpec | None) -> IndexSpec:
    """`cfg.index` as its `IndexSpec` (None: the defaults, an exact flat index)."""
    return IndexSpec.from_cfg(node)


def cache_spec(node: ConfigNode | CacheSpec | None) -> CacheSpec:
    """`cfg.cache` as its `CacheSpec` (None: the defaults)."""
    return CacheSpec() if node is None else to_spec(CacheSpec, node)


# the settings dataclass of each propositionizer `type` (an unknown type: the shared settings,
# and `generate_propositions` names it)
_PROPOSITIONIZERS = {
    "file": PropositionizerSettings,
    "model": ModelSettings,
    "teacher": TeacherSettings,
}


def propositionizer_settings(node: ConfigNode) -> PropositionizerSettings:
    """`cfg.propositionizer` as the settings of its `type` (`ModelSettings`, `TeacherSettings`);
    null keys keep the defaults, except the teacher's `api_key_env: null` (no key)."""
    if isinstance(node, PropositionizerSettings):
        return node
    cls = _PROPOSITIONIZERS.get(str(node.get("type") or "model"), PropositionizerSettings)
    overrides = {}
    if cls is TeacherSettings and "api_key_env" in node:
        overrides["api_key_env"] = node.get("api_key_env")
    return from_config(cls, node, **overrides)


def trainer_args(cfg: DictConfig) -> dict[str, Any] | None:
    """`cfg.trainer`'s plain values for a predict trainer (None without a trainer group);
    `default_root_dir` is left out where it cannot be resolved (outside a Hydra run)."""
    node = cfg.get("trainer")
    return None if node is None else plain_settings(node, optional=("default_root_dir",))
