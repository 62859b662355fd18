"""Export a trained propositionizer as a plain Hugging Face directory (`save_pretrained` model +
tokenizer + `manifest.json`; loads without densex), atomically: a failure at any point leaves
the previous export complete at its place.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from densex.utils.io import mkdtemp, write_manifest
from densex.utils.locks import locked

__all__ = ["export_hf", "swap_dir"]


def export_hf(model: Any, tokenizer: Any, out_dir: str | os.PathLike, **manifest: Any) -> Path:
    """`save_pretrained` `model` + `tokenizer` and a `manifest.json` (kind, n_params and
    `manifest`) to `out_dir`, built in a temp dir beside it and swapped in (`swap_dir`)."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    with locked(out, "exported model"):  # two runs exporting to one dir swap in turn
        tmp = mkdtemp(out.parent, prefix=f".{out.name}.")
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            n_params = sum(p.numel() for p in model.parameters())
            write_manifest(
                tmp / "manifest.json", kind="propositionizer", n_params=n_params, **manifest
            )
            swap_dir(tmp, out)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(tmp)
            raise
    return out


def swap_dir(new: Path, out: Path) -> None:
    """Put directory `new` at `out`: the old `out` is renamed aside first and deleted only
    after the swap, so a failure at any point leaves a complete export at `out` (the old one
    is moved back if the swap fails)."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
        os.replace(out, old)  # onto the empty placeholder directory
    try:
        os.replace(new, out)
    except BaseException:
        if old is not None:
            os.replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
