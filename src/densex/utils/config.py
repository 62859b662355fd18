"""Typed settings from a config node: one rule for every backend that reads a Hydra group.

A settings dataclass states each default once; `from_config` fills it from a `DictConfig` or a
plain mapping, where a missing or null key keeps the dataclass default and keys that are not
fields (`type`, `name`, another backend's options) are ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")
# config-types: the one conversion module (config node -> plain values or a spec)
# A config node (an OmegaConf DictConfig) or a plain mapping of one group's settings. Taken
# only here and by the spec constructors (`RetrieverSpec.from_cfg`, ...) that the entry
# pipelines call once; the layers below `pipelines/` get the typed objects or plain values.
# (This module is the one place that converts, so it names the config types; see
# docs/architecture.md, "Typed at the edge".)
ConfigNode = Mapping[str, Any]
_HYDRA_KEYS = ("_target_", "_convert_", "_partial_", "_recursive_")


def plain_data(value: Any) -> Any:
    """A config node (DictConfig/ListConfig, resolved) as plain dicts and lists; anything else
    as it is."""
    # config-import: this module is the one place a config node becomes plain values or a spec
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def plain_settings(node: ConfigNode | None, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """A config node as a plain dict (`{}` for None), resolved key by key; a key of `optional`
    whose interpolation cannot be resolved here is left out (the trainer group's
    `default_root_dir: ${paths.output_dir}` outside a Hydra run: a predict trainer is given
    its own root or writes nothing there)."""
    # config-import: the one conversion module: a node resolved key by key into plain values
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError  # config-import: as above

    if node is None:
        return {}
    if not OmegaConf.is_config(node):
        return dict(node)
    out: dict[str, Any] = {}
    for key in node:
        try:
            out[str(key)] = plain_data(node[key])
        except InterpolationResolutionError:
            if key not in optional:
                raise
    return out


def to_spec(cls: type[T], node: ConfigNode | T) -> T:
    """The schema dataclass `cls` of a config group's node: `OmegaConf.to_object` of a node
    composed onto it (its `__post_init__` checks run), else the node's resolved values merged
    onto `cls` (a plain dict or an untyped node: unknown keys are an error naming them)."""
    # config-import: the one conversion module: a group's node into its schema dataclass
    from omegaconf import DictConfig, OmegaConf

    if isinstance(node, cls):
        return node
    if isinstance(node, DictConfig) and OmegaConf.get_type(node) is cls:
        return OmegaConf.to_object(node)  # type: ignore[return-value]
    values = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), values))  # type: ignore[return-value]


def from_config(
    cls: type[T], cfg: Mapping[str, Any] | None, *, strict: bool = False, **overrides: Any
) -> T:
    """An instance of dataclass `cls` from the non-null keys of `cfg` that name its fields.

    A value whose field default is an int, float or str is converted to that type (`"8"` -> 8),
    a list to a tuple where the default is a tuple, a nested node to plain dicts/lists;
    `overrides` win over the config. `strict=True`: a key that is no field (a typo) is a
    ValueError naming it (`_target_` and `_convert_` excepted).
    """
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if strict and cfg is not None:
        unknown = sorted(str(k) for k in cfg if k not in names and k not in _HYDRA_KEYS)
        if unknown:
            label = f"{cls.__name__} {cfg.get('name')!r}" if "name" in cfg else cls.__name__
            raise ValueError(f"{label}: unknown config keys {unknown}")
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        value = plain_data(cfg.get(field.name)) if cfg is not None else None
        if value is None:
            continue
        default = field.default
        if isinstance(default, (bool, int, float, str)) and not isinstance(default, bool):
            value = type(default)(value)
        elif isinstance(default, tuple):
            value = tuple(value)
        kwargs[field.name] = value
    kwargs.update(overrides)
    return cls(**kwargs)


def check_choices(label: str, **values: tuple[Any, tuple[Any, ...]]) -> None:
    """Raise a ValueError `"<label>: key=value not in allowed"` for the first of `values`
    (`key=(value, allowed)`) whose value is not one of its allowed ones."""
    for key, (value, allowed) in values.items():
        if value not in allowed:
            raise ValueError(f"{label}: {key}={value!r} not in {allowed}")


CELL_NAME_LIMIT = 120  # characters of a sweep cell's folder name (file systems stop at 255)


def cell_dirname(overrides: str, limit: int = CELL_NAME_LIMIT) -> str:
    """A sweep cell's folder name from its `override_dirname` (`granularity=passage,...`):
    the string itself when it fits in `limit` characters, else its first characters cut at
    an override boundary and a short hash of the whole (`granularity=mixed,...~1a2b3c4d`),
    so two cells never share a folder and no name exceeds the file system's limit (long
    overrides such as a list of fusion members or a decoding's ten settings)."""
    if len(overrides) <= limit:
        return overrides
    digest = hashlib.sha1(overrides.encode("utf-8")).hexdigest()[:8]
    head = overrides[: limit - len(digest) - 2]
    cut = head.rfind(",")
    return f"{head[:cut] if cut > 0 else head},~{digest}"
