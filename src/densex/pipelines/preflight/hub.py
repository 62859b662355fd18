"""Where a model or a hub dataset will load from, found without downloading anything, and the
error every preflight check raises.

Contract: `check_model(name, key, fixes)` -> `local` | `HF cache` | `hub` | `packaged` |
`built`; `hf_dataset_source(src, key)` -> `local` | `HF cache` | `hub`. The hub is asked
only when online (`hub_offline()` is false); anything that cannot load raises a
`PreflightError` naming the config key and the override that fixes it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, try_to_load_from_cache
from huggingface_hub.utils import RepositoryNotFoundError

from densex.utils.models import resolve_model


class PreflightError(Exception):
    """A configuration that cannot run, with the key to change and how."""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def hub_offline() -> bool:
    """Whether the Hugging Face hub must not be contacted (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    truthy = {"1", "true", "yes", "on"}
    return any(
        os.environ.get(v, "").lower() in truthy for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def hub_cached(repo_id: str, repo_type: str = "model") -> bool:
    """Whether the Hugging Face cache holds `repo_id` (one of its usual files); False for an
    id the hub would reject."""
    names = ("README.md", ".gitattributes") if repo_type == "dataset" else ()
    names += ("config.json", "modules.json", "tokenizer_config.json")
    for name in names:
        try:
            hit = try_to_load_from_cache(repo_id, name, repo_type=repo_type)
        except Exception:  # noqa: BLE001 - an id the hub would reject is simply not cached
            return False
        if isinstance(hit, str):
            return True
    return False


def hf_dataset_source(src: str, key: str) -> str:
    """A `save_to_disk` directory, or a hub dataset that is cached or reachable."""
    if Path(os.path.expanduser(src)).exists():
        return "local"
    if src.startswith((".", "/", "~")):
        raise PreflightError(f"{key}={src}: directory not found")
    if hub_cached(src, repo_type="dataset"):
        return "HF cache"
    if hub_offline():
        raise PreflightError(
            f"{key}: dataset '{src}' is not in the Hugging Face cache and the hub is offline"
            f" (HF_HUB_OFFLINE=1). Fix: {key}=/path/to/a/save_to_disk/dir, or fetch it where"
            f" the hub is reachable (hf download {src} --repo-type dataset)"
        )
    return "hub"


def _ask_hub(name: str, key: str, fix: str) -> None:
    """Raise a `PreflightError` unless the (online) hub knows model `name`."""
    try:
        try:
            HfApi().model_info(name, timeout=10)
        except RepositoryNotFoundError:
            raise PreflightError(
                f"{key}: no model '{name}' on the Hugging Face hub. Fix: {fix}"
            ) from None
    except PreflightError:
        raise
    except Exception as e:  # noqa: BLE001 - no answer from the hub, whatever the reason
        raise PreflightError(
            f"{key}: model '{name}' is not cached and the hub did not answer"
            f" ({type(e).__name__}). Fix: {fix}, or set HF_HUB_OFFLINE=1 on machines without"
            " internet"
        ) from None


def check_model(name: Any, key: str, fixes: Sequence[str]) -> str:
    """Where model `name` (config key `key`) will load from: `local`, `HF cache`, `hub`,
    `packaged` or `built` (model=tiny); else a `PreflightError` naming `key` and `fixes`."""

    fix = " or ".join(fixes)
    if name in (None, "", "???"):
        raise PreflightError(f"{key} is not set. Fix: {fix}")
    name = str(name)
    if name == "tiny":
        return "built"
    try:
        path = resolve_model(name)
    except FileNotFoundError:
        raise PreflightError(f"{key}={name}: no such directory. Fix: {fix}") from None
    except ImportError as e:
        raise PreflightError(f"{key}={name}: {first_line(e)}") from None
    if name.startswith("packaged:"):
        return "packaged"
    if Path(path).exists():
        return "local"
    if hub_cached(name):
        return "HF cache"
    if hub_offline():
        raise PreflightError(
            f"{key}: model '{name}' is not in the Hugging Face cache and the hub is offline"
            f" (HF_HUB_OFFLINE=1). Fix: {fixes[0]} (a directory holding the model's files)"
            + "".join(f", or {f}" for f in fixes[1:])
            + f"; or download it where the hub is reachable: hf download {name}"
        )
    _ask_hub(name, key, fix)
    return "hub"
