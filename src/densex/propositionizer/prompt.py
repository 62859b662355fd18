"""The teacher's prompt template (the paper's Figure 8, `conf/prompts/figure8.txt`): where it
is, loading it (all three slots required) and filling it for one passage.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from densex.utils.io import DataError
from densex.utils.records import Record

__all__ = ["default_prompt_path", "fill_prompt", "load_template"]

_SLOT = re.compile(r"\{(title|section|text)\}")


def default_prompt_path() -> Path:
    """`conf/prompts/figure8.txt` of this checkout (the paper's Figure 8, verbatim)."""
    root = os.environ.get("PROJECT_ROOT") or Path(__file__).resolve().parents[3]
    return Path(root) / "conf" / "prompts" / "figure8.txt"


def load_template(path: str | os.PathLike) -> str:
    """The prompt template, without the file's final newline; it must have all three slots."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, None, None, "prompt template not found")
    text = path.read_text(encoding="utf-8")
    text = text[:-1] if text.endswith("\n") else text
    missing = {"title", "section", "text"} - set(_SLOT.findall(text))
    if missing:
        raise DataError(path, None, None, f"prompt template lacks slots {sorted(missing)}")
    return text


def fill_prompt(template: str, passage: Record) -> str:
    """Fill `{title}`, `{section}`, `{text}` in one pass; other braces (the example's JSON)
    and braces inside the passage are left exactly as they are."""
    values = {
        "title": passage.get("title") or "",
        "section": passage.get("section") or "",
        "text": passage["text"],
    }
    return _SLOT.sub(lambda m: values[m.group(1)], template)
