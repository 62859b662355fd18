"""Typed settings from a config node: one rule for every backend that reads a Hydra group.

A settings dataclass states each default once; `from_config` fills it from a `DictConfig` or a
plain mapping, where a missing or null key keeps the dataclass default and keys that are not
fields (`type`, `name`, another backend's options) are ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def from_config(cls: type[T], cfg: Mapping[str, Any] | Any | None, **overrides: Any) -> T:
    """An instance of dataclass `cls` from the non-null keys of `cfg` that name its fields.

    A value whose field default is an int, float or str is converted to that type (`"8"` -> 8),
    a list to a tuple where the default is a tuple; `overrides` win over the config.
    """
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        value = cfg.get(field.name) if cfg is not None else None
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
