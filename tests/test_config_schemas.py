"""The typed config groups: every YAML option composes onto its schema into a valid object."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from tests.helpers.config import CONF_DIR, compose_config

from densex.pipelines.schemas import SCHEMAS


def schema_of(group: str, name: str) -> type:
    """The dataclass a group file is composed onto (following `defaults` to its schema; a
    `_global_` option names it with its package: `schema@granularity`)."""
    first = OmegaConf.load(CONF_DIR / group / f"{name}.yaml").defaults[0].split("@")[0]
    return SCHEMAS.get((group, first)) or schema_of(group, first)


# options whose object names another option's unit: granularity=sentence-late searches
# sentences (it sets retriever.late_chunking too; the cell is named `sentence-late`)
NAMED_APART = {("granularity", "sentence-late"): "sentence"}


GROUP_OPTIONS = [
    (group, path.stem)
    for group in sorted({g for g, _ in SCHEMAS})
    for path in sorted((CONF_DIR / group).glob("*.yaml"))
]


@pytest.mark.parametrize(("group", "name"), GROUP_OPTIONS)
def test_every_option_composes_to_its_typed_object(group: str, name: str) -> None:
    entry = "serve" if group == "serve" else "evaluate"  # the serve group is serve.py's alone
    node = compose_config(entry, f"{group}={name}")[group]
    # the schema the file names in its defaults is the object it becomes
    schema = schema_of(group, name)
    assert OmegaConf.get_type(node) is schema
    if (group, name) == ("corpus", "beir"):  # the user names the BEIR folder
        with pytest.raises(ValueError, match="corpus.dir"):
            OmegaConf.to_object(node)
        return
    obj = OmegaConf.to_object(node)
    assert isinstance(obj, schema)
    assert getattr(obj, "name", name) == NAMED_APART.get((group, name), name)


def test_group_files_state_only_what_differs_from_the_schema() -> None:
    """No group file restates a default of its schema (each default is stated once)."""
    import dataclasses

    restated = []
    for group, name in GROUP_OPTIONS:
        raw = OmegaConf.load(CONF_DIR / group / f"{name}.yaml")
        schema = schema_of(group, name)
        for f in dataclasses.fields(schema):
            if f.default is dataclasses.MISSING or f.name == "name" or f.name not in raw:
                continue
            if OmegaConf.is_interpolation(raw, f.name):
                continue
            if raw[f.name] == f.default:
                restated.append(f"{group}/{name}.yaml: {f.name}")
    assert restated == []


def test_a_misspelt_key_fails_at_composition_naming_file_and_key(tmp_path: Path) -> None:
    (tmp_path / "retriever").mkdir()
    (tmp_path / "retriever" / "typo.yaml").write_text(
        "defaults:\n  - schema\n  - _self_\nname: typo\nquery_model: m\npoolin: cls\n"
    )
    with pytest.raises(ConfigCompositionException, match=r"retriever/typo(.|\n)*poolin"):
        compose_config("evaluate", f"hydra.searchpath=[file://{tmp_path}]", "retriever=typo")
    with pytest.raises(ConfigCompositionException, match="max_length"):
        compose_config("evaluate", "retriever.max_length=long")


def test_a_bad_value_fails_when_the_object_is_built() -> None:
    node = compose_config("evaluate", "retriever.pooling=max").retriever
    with pytest.raises(ValueError, match="pooling='max'"):
        OmegaConf.to_object(node)
