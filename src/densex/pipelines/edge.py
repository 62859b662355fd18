"""The config tree turned into what the layers below `pipelines/` take: typed specs and plain
values, once per entry (docs/architecture.md, "Typed at the edge").

`corpus_spec`, `retriever_spec` (`BM25Spec` for `type: sparse`, else `RetrieverSpec`),
`index_spec`, `cache_spec`, `dataset_spec`: a group's node as its schema object; `trainer_args`: the `trainer` group's plain values for the predict
trainers of encoding and generation; `propositionizer_settings`: the propositionizer group's
settings dataclass for its `type`; `build_reader`: the `reader` node's QA reader (or None);
`wandb_settings`: the `logger.wandb` node's plain values (or None: no W&B).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from densex.corpus.spec import CorpusSpec
from densex.data.spec import DatasetSpec
from densex.propositionizer.settings import ModelSettings, PropositionizerSettings, TeacherSettings
from densex.retrieval.spec import IndexSpec, retriever_spec
from densex.utils.config import ConfigNode, from_config, plain_settings, to_spec
from densex.utils.integrity import CacheSpec

if TYPE_CHECKING:  # the reader (transformers) loads only when a cell has one
    from densex.qa.reader import Reader

__all__ = [
    "build_reader",
    "cache_spec",
    "corpus_spec",
    "dataset_spec",
    "index_spec",
    "propositionizer_settings",
    "retriever_spec",
    "trainer_args",
    "wandb_settings",
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


def build_reader(node: ConfigNode | Reader | None) -> Reader | None:
    """The reader a `reader` node describes, or None for `reader=none`.

    Nodes name their class or factory with `_target_` (Hydra instantiate); a bare mapping
    with `model` builds a `Reader`. An already built `Reader` is passed through so a sweep
    can share one.
    """
    from densex.qa.reader import Reader  # transformers: only for a cell with a reader

    if node is None or isinstance(node, Reader):
        return node
    name = node.get("name", None)
    if name in (None, "none") and "model" not in node and "_target_" not in node:
        return None
    if "_target_" in node:
        from hydra.utils import instantiate

        return instantiate(node, _convert_="all")
    kwargs = dict(node)
    if kwargs.get("model") in (None, "???"):
        raise ValueError("reader.model is required: a hub id or a local checkpoint directory")
    return Reader(**kwargs)


def wandb_settings(cfg: DictConfig) -> dict[str, Any] | None:
    """The `logger.wandb` node as a plain dict, or None when W&B is not selected.

    Values that cannot be resolved here (e.g. `${paths.output_dir}` in a multirun callback,
    outside any job) come back as None, so the caller's own default applies.
    """
    logger = cfg.get("logger")
    if not logger or "wandb" not in logger:
        return None
    node = logger.wandb
    out: dict[str, Any] = {}
    for key in node:
        try:
            value = node[key]
        except Exception:  # noqa: BLE001 - an interpolation that only resolves inside a job
            value = None
        out[key] = (
            OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        )
    return out


def trainer_args(cfg: DictConfig) -> dict[str, Any] | None:
    """`cfg.trainer`'s plain values for a predict trainer (None without a trainer group);
    `default_root_dir` is left out where it cannot be resolved (outside a Hydra run)."""
    node = cfg.get("trainer")
    return None if node is None else plain_settings(node, optional=("default_root_dir",))
