"""Content-addressed cache directories.

Embeddings and indexes are keyed by what they were made from (corpus, granularity,
retriever, and the hash of the input files and settings), so the jobs of a sweep share them
and a changed input never reuses a stale artifact.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from densex.utils.io import file_sha256, mkdtemp, write_manifest
from densex.utils.locks import build_once

_file_hash_memo: dict[tuple[str, int, int], str] = {}


def hash_file(path: str | os.PathLike) -> str:
    """SHA-256 of a file, memoised on (path, size, mtime) within a process."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _file_hash_memo:
        _file_hash_memo[key] = file_sha256(p)
    return _file_hash_memo[key]


def content_key(**parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts (dict order does not matter)."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def artifact_dir(cache_dir: str | os.PathLike, *names: str, key: str) -> Path:
    """`cache_dir/name1/name2/.../<key>`: readable names for people, the key for correctness."""
    safe = [n.replace("/", "_").replace(os.sep, "_") for n in names]
    return Path(cache_dir).joinpath(*safe, key)


def ensure_built_dir(
    out_dir: str | os.PathLike,
    build: Callable[[Path], Any],
    manifest: dict[str, Any] | None = None,
    marker: str = "config.json",
) -> Path:
    """`out_dir`, built once by `build(tmp_dir)` in a temporary sibling and renamed into place.

    A crash never leaves a half-built directory, and concurrent processes build it once: the
    others wait for the builder's lock (`utils.locks.build_once`) and reuse its directory. A
    directory holding `marker` counts as built; `manifest` (if given) is written beside the
    build's files.
    """
    out = Path(out_dir)
    return build_once(
        out,
        "model",
        reuse=lambda: out if (out / marker).exists() else None,
        build=lambda: _build_dir(out, build, manifest),
    )


def _build_dir(out: Path, build: Callable[[Path], Any], manifest: dict[str, Any] | None) -> Path:
    """`build(tmp)` in a temp sibling of `out`, the manifest beside, renamed to `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = mkdtemp(out.parent, prefix=f".{out.name}.")
    try:
        build(tmp)
        if manifest is not None:
            write_manifest(tmp / "manifest.json", **manifest)
        if out.exists():  # an unfinished directory without the marker (an older version's)
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
