"""A units file's SHA-256 and line count without re-reading it: what its embeddings are keyed by.

Embeddings (and BM25 indexes) are keyed by the units JSONL's SHA-256 and cut into shards by its
line count (`retrieval.build`). Computing both reads the whole file, which at FactoidWiki size
(257M propositions) is a long sequential read before the first query of every process that
opens the index. So the units stage records them once, when it writes the files:
`digest_records(out, names)` is the manifest's `digests` (`{name: {"sha256", "lines", "size",
"mtime_ns"}}`, measured in one read per file), and `units_digest(path)` returns the record from
the manifest beside `path` when the file still has the recorded size and mtime (the units
stage's `cache.verify` check has then also matched its content hash when verification is on).
Otherwise (no manifest, a manifest from before `digests`, a changed or copied file, a units
file made elsewhere, a fused cell's combined file) it reads the file once (SHA-256 and
newlines in the same pass, memoised per process on path, size and mtime) and, for a file its
manifest lists (`files`) at the same size, adds the record to that manifest (atomically,
under the directory's build lock when no build holds it), so an older cache pays this once.
Either way the values are the same bytes' SHA-256 (`utils.cache.hash_file`) and newline
count: cache keys do not change.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from densex.utils.io import DataError, read_json, write_manifest
from densex.utils.locks import held_here, lock_file, release, try_claim
from densex.utils.logging import get_logger

log = get_logger(__name__)

__all__ = ["UnitsDigest", "digest_records", "file_digest", "units_digest"]

_memo: dict[tuple[str, int, int], UnitsDigest] = {}


@dataclass(frozen=True)
class UnitsDigest:
    """The hex SHA-256 of a file's bytes and its number of newline bytes."""

    sha256: str
    lines: int


def file_digest(path: str | os.PathLike, chunk: int = 16 << 20) -> UnitsDigest:
    """SHA-256 and newline count of a file, in one streamed read."""
    h, lines = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
            lines += block.count(b"\n")
    return UnitsDigest(h.hexdigest(), lines)


def digest_records(out: str | os.PathLike, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """`{name: {"sha256", "lines", "size", "mtime_ns"}}` of the files `names` in `out` (the
    units manifest's `digests`); each file is read once."""
    return {name: _record(Path(out) / name) for name in names}


def _record(path: Path) -> dict[str, Any]:
    before = path.stat()
    digest = file_digest(path)
    st = path.stat()
    if (st.st_size, st.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        raise DataError(path, None, None, "the file changed while it was being hashed")
    _memo[(str(path.resolve()), st.st_size, st.st_mtime_ns)] = digest
    return {"sha256": digest.sha256, "lines": digest.lines, "size": st.st_size,
            "mtime_ns": st.st_mtime_ns}  # fmt: skip


def units_digest(path: str | os.PathLike) -> UnitsDigest:
    """The SHA-256 and line count of a units file: from its directory's manifest when the file
    matches the recorded size and mtime, else read once (see the module doc)."""
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key in _memo:
        return _memo[key]
    manifest = _manifest(p.parent / "manifest.json")
    rec = (manifest.get("digests") or {}).get(p.name) if manifest else None
    if rec and (int(rec["size"]), int(rec["mtime_ns"])) == (st.st_size, st.st_mtime_ns):
        digest = UnitsDigest(str(rec["sha256"]), int(rec["lines"]))
    else:
        digest = file_digest(p)
        now = p.stat()
        if (now.st_size, now.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            raise DataError(p, None, None, "the file changed while it was being hashed")
        if manifest and _listed(manifest, p.name, st.st_size):
            _add_record(p, st, digest)
    _memo[key] = digest
    return digest


def _manifest(path: Path) -> dict[str, Any] | None:
    """The units manifest at `path` (None when there is none or it is not a units manifest)."""
    if not path.is_file():
        return None
    try:
        man = read_json(path)
    except DataError as e:
        log.warning("%s: not read (%s); hashing the units file instead", path, e)
        return None
    return man if isinstance(man, dict) and isinstance(man.get("units"), dict) else None


def _listed(manifest: dict[str, Any], name: str, size: int) -> bool:
    """Whether the manifest's `files` lists `name` at `size` bytes (a file the stage wrote)."""
    rec = (manifest.get("files") or {}).get(name)
    return isinstance(rec, dict) and int(rec.get("size", -1)) == size


def _add_record(path: Path, st: os.stat_result, digest: UnitsDigest) -> None:
    """Add the digest of `path` to its (older) manifest, atomically, under the units
    directory's build lock when it is free (a running build writes its own manifest); a
    read-only cache keeps its manifest and is hashed again by the next process."""
    out, manifest_path = path.parent, path.parent / "manifest.json"
    if str(lock_file(out)) in held_here():
        return  # called inside this directory's own build
    try:
        if not try_claim(out, "units manifest"):
            return
        try:
            manifest = read_json(manifest_path)  # re-read under the lock
            if not _listed(manifest, path.name, st.st_size):
                return
            digests = dict(manifest.get("digests") or {})
            digests[path.name] = {"sha256": digest.sha256, "lines": digest.lines,
                                  "size": st.st_size, "mtime_ns": st.st_mtime_ns}  # fmt: skip
            write_manifest(manifest_path, **{**manifest, "digests": digests})
        finally:
            release(out)
    except (OSError, DataError) as e:
        log.warning("%s: could not record the digest of %s (%s)", manifest_path, path.name, e)
        return
    log.info("units: recorded the SHA-256 of %s in %s", path.name, manifest_path)
