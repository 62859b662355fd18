"""The config groups' schemas, registered in Hydra's ConfigStore before any composition.

Each group's YAML files start with `defaults: [schema, _self_]` and so are composed onto a
typed dataclass: its defaults are stated once (in the dataclass), a file names only what
differs, values are type-checked, and a misspelt key fails at composition naming the file and
key. `OmegaConf.to_object(cfg.<group>)` (or the dataclass's `from_cfg`) gives the validated
object. The entry scripts and the tests' compose helper call `register_configs()` first;
preflight builds every group's object (`typed_groups`) before any work, so a bad value is
reported at once, naming its key.
"""

from __future__ import annotations

from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from densex.corpus.spec import CorpusSpec
from densex.data.spec import DatasetSpec
from densex.pipelines.specs import (
    FusionSpec,
    GranularitySpec,
    PropositionsTaskSpec,
    RetrievalTaskSpec,
    ServeSpec,
)
from densex.propositionizer.settings import ModelSettings, PropositionizerSettings, TeacherSettings
from densex.retrieval.spec import BM25Spec, IndexSpec, RetrieverSpec
from densex.utils.config import cell_dirname
from densex.utils.integrity import CacheSpec

# (group, schema name) -> dataclass; the YAML files of the group name the schema in `defaults`
SCHEMAS: dict[tuple[str, str], type] = {
    ("corpus", "schema"): CorpusSpec,
    ("dataset", "schema"): DatasetSpec,
    ("retriever", "schema"): RetrieverSpec,
    ("retriever", "schema_bm25"): BM25Spec,
    ("index", "schema"): IndexSpec,
    ("cache", "schema"): CacheSpec,
    ("granularity", "schema"): GranularitySpec,
    ("fusion", "schema"): FusionSpec,
    ("propositionizer", "schema_file"): PropositionizerSettings,
    ("propositionizer", "schema_model"): ModelSettings,
    ("propositionizer", "schema_teacher"): TeacherSettings,
    ("task", "schema_retrieval"): RetrievalTaskSpec,
    ("task", "schema_propositions"): PropositionsTaskSpec,
    ("serve", "schema"): ServeSpec,
}


# (group, schema name) -> the ConfigStore entry register_configs made for it
_stored: dict[tuple[str, str], Any] = {}


def _entry(store: ConfigStore, group: str, name: str) -> Any:
    """The store's entry for `group/name` (None: none)."""
    node: Any = store.repo
    for part in (*group.split("/"), f"{name}.yaml"):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def register_configs() -> None:
    """Store every group schema in Hydra's ConfigStore and register the `densex.cell_dirname`
    resolver (idempotent: a schema whose entry the store still holds is not stored again,
    which would rebuild its structured config, ~20 ms of each composition)."""
    store = ConfigStore.instance()
    for (group, name), node in SCHEMAS.items():
        if (entry := _entry(store, group, name)) is None or entry is not _stored.get((group, name)):
            store.store(group=group, name=name, node=node)
            _stored[group, name] = _entry(store, group, name)
    if not OmegaConf.has_resolver("densex.cell_dirname"):  # conf/hydra/evaluate.yaml's subdir
        OmegaConf.register_new_resolver("densex.cell_dirname", cell_dirname)


def typed_groups(cfg: DictConfig) -> dict[str, Any]:
    """`{group: validated object}` for each group of `cfg` composed onto a registered schema
    (`OmegaConf.to_object`, so each dataclass's `__post_init__` checks run); a bad or missing
    value is a ValueError naming the config key."""
    schemas = set(SCHEMAS.values())
    objects: dict[str, Any] = {}
    for key in cfg:
        node = cfg.get(key)
        if not isinstance(node, DictConfig) or OmegaConf.get_type(node) not in schemas:
            continue
        try:
            objects[str(key)] = OmegaConf.to_object(node)
        except (ValueError, OmegaConfBaseException) as e:
            raise ValueError(f"config group {key}: {e}") from e
    return objects
