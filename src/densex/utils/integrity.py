"""Cached artifacts are verified before reuse, and temp files of dead runs are cleaned up.

A manifest records every file of its artifact as `{"size", "hash"}` (`file_record`); before
the artifact is reused `verify_files` reads every byte again (xxh3-128 when `xxhash` is
installed, else BLAKE2b-128; the algorithm is part of the recorded hash). A mismatch is
reported with the file and what differs, then, by the process-wide policy (`configure`,
from the `cache` config group): the artifact is rebuilt (`on_damaged: rebuild`, default) or
refused with a `DamagedArtifact` error naming the file and the command to rebuild
(`on_damaged: refuse`). Large artifacts (embeddings, indexes) are hashed per shard, so a
damaged shard is rebuilt alone.

`atomic_open` (`utils.io`) names its temp files `.<name>.<host>-<pid>.<random>.tmp`;
`remove_orphans(dir)` deletes those whose process is gone (same host, pid not alive), and any
older than a day, so a `kill -9` leaves nothing behind for long.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from densex.utils.config import check_choices
from densex.utils.io import DataError, tmp_tag
from densex.utils.logging import get_logger
from densex.utils.records import Record

log = get_logger(__name__)

try:  # ~10x faster than BLAKE2b: verification is bound by the disk, not the hash
    import xxhash

    DEFAULT_ALGO = "xxh3_128"
except ImportError:  # pragma: no cover - xxhash comes with `datasets`
    xxhash = None
    DEFAULT_ALGO = "blake2b_128"

ON_DAMAGED = ("rebuild", "refuse")


@dataclass
class CacheSpec:
    """The `cache` config group: how cached artifacts are verified and embedding shards sized.

    Shard rows (`retrieval.build.shard_size_for`): `embedding_shard_size` when an int, else
    (`auto`) clamp(min(ceil(units / shard_target_count), shard_max_seconds *
    shard_units_per_second), shard_min_size, shard_max_size)."""

    verify: bool = True  # re-hash every file of a cached artifact before reusing it
    on_damaged: str = "rebuild"  # rebuild | refuse (a DamagedArtifact naming the file)
    clean_orphans: bool = True  # delete temp files of dead processes under the cache
    embedding_shard_size: Any = "auto"  # auto | rows per embedding shard
    shard_max_seconds: float = 120.0  # encoding a kill may lose, at the assumed speed
    shard_units_per_second: float = 200.0
    shard_target_count: int = 64
    shard_min_size: int = 256
    shard_max_size: int = 50_000
    lock_timeout_s: float = 86_400.0  # longest wait for another process's build (utils.locks)

    def __post_init__(self) -> None:
        check_choices("cache", on_damaged=(self.on_damaged, ON_DAMAGED))


_DEFAULT_POLICY: dict[str, Any] = dataclasses.asdict(CacheSpec())
_policy: dict[str, Any] = dict(_DEFAULT_POLICY)
_TMP = re.compile(r"^\..+\.(?P<host>[^.]+)-(?P<pid>\d+)\.[^.]+\.tmp$")
ORPHAN_MAX_AGE_S = 24 * 3600.0


class DamagedArtifact(DataError):
    """A cached file does not match its manifest (size or content hash)."""


def configure(spec: CacheSpec | None = None, **settings: Any) -> dict[str, Any]:
    """Set the process-wide policy from the `cache` group's `CacheSpec` (`verify`,
    `on_damaged`, `clean_orphans`, and the shard-size settings `retrieval.build.shard_size_for`
    reads) and/or single settings by keyword (`on_damaged="refuse"`); None values and settings
    not given keep theirs. Returns the policy."""
    values = {**(dataclasses.asdict(spec) if spec is not None else {}), **settings}
    unknown = sorted(set(values) - set(_DEFAULT_POLICY))
    if unknown:
        raise ValueError(f"cache: unknown settings {unknown}")
    for key, value in values.items():
        if value is not None:
            _policy[key] = value
    check_choices("cache", on_damaged=(_policy["on_damaged"], ON_DAMAGED))
    _policy["verify"] = bool(_policy["verify"])
    return dict(_policy)


def reset() -> None:
    """Back to the defaults (verify, rebuild, clean orphans; `auto` shard sizes)."""
    _policy.clear()
    _policy.update(_DEFAULT_POLICY)


def policy() -> dict[str, Any]:
    return dict(_policy)


def _hasher(algo: str):
    if algo == "xxh3_128":
        if xxhash is None:
            raise ValueError("the manifest's xxh3_128 hash needs the xxhash package")
        return xxhash.xxh3_128()
    if algo == "blake2b_128":
        return hashlib.blake2b(digest_size=16)
    raise ValueError(f"unknown hash algorithm {algo!r}")


def file_hash(path: str | os.PathLike, algo: str = DEFAULT_ALGO, chunk: int = 4 << 20) -> str:
    """`"<algo>:<hex>"` of a file's bytes, streamed in `chunk`-byte blocks."""
    h = _hasher(algo)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return f"{algo}:{h.hexdigest()}"


def file_record(path: str | os.PathLike) -> dict[str, Any]:
    """`{"size", "hash"}` of one file, for a manifest."""
    return {"size": os.path.getsize(path), "hash": file_hash(path)}


def file_records(root: str | os.PathLike, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """`{name: file_record(root / name)}` for the files of an artifact directory."""
    return {name: file_record(Path(root) / name) for name in names}


def check_file(path: str | os.PathLike, record: Record | None) -> str | None:
    """Why `path` does not match its manifest record, or None when it does (size first, so a
    truncated file costs no read). A record without a hash (an old manifest) checks the size."""
    path = Path(path)
    if record is None:
        return "no size/hash in the manifest (written by an older version)"
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if "size" in record and size != int(record["size"]):
        return f"size {size} bytes, manifest says {record['size']}"
    expected = record.get("hash")
    if expected:
        algo = str(expected).split(":", 1)[0]
        try:
            got = file_hash(path, algo)
        except ValueError as e:
            return str(e)
        if got != expected:
            return "content hash differs from the manifest (same size: bytes changed in place)"
    return None


def verify_files(
    root: str | os.PathLike, records: Mapping[str, Record | None]
) -> list[tuple[Path, str]]:
    """`(file, problem)` for every file of `records` (name -> record) under `root` that does
    not match; empty when all match or verification is off (`cache.verify=false`)."""
    if not _policy["verify"]:
        return []
    problems = []
    for name, record in records.items():
        why = check_file(Path(root) / name, record)
        if why is not None:
            problems.append((Path(root) / name, why))
    return problems


def handle_damage(
    problems: list[tuple[Path, str]], what: str, rebuild_hint: str | None = None
) -> bool:
    """Report damaged files; True = the caller rebuilds them, else (`on_damaged: refuse`) a
    `DamagedArtifact` naming the first file and how to rebuild. False when nothing is damaged."""
    if not problems:
        return False
    for path, why in problems[:10]:
        log.warning("damaged %s: %s: %s", what, path, why)
    if _policy["on_damaged"] == "refuse":
        path, why = problems[0]
        more = f" (and {len(problems) - 1} more files)" if len(problems) > 1 else ""
        hint = rebuild_hint or f"delete {path.parent} or rerun with cache.on_damaged=rebuild"
        raise DamagedArtifact(path, None, None, f"damaged {what}: {why}{more}; {hint}")
    log.warning("rebuilding %d damaged %s file(s)", len(problems), what)
    return True


# ----------------------------------------------------------------------------- orphans


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_orphans(
    directory: str | os.PathLike, max_age_s: float = ORPHAN_MAX_AGE_S, depth: int = 0
) -> int:
    """Delete `atomic_open` temp files (and `utils.io.mkdtemp` build dirs) in `directory` left
    by dead processes: this host's
    whose pid is gone, any host's older than `max_age_s`. `depth` > 0 also scans the
    subdirectories that many levels down (a fan-out cache such as the teacher's `xx/key.json`);
    only names are read, a file is stat'ed only when it looks like a temp. Returns how many."""
    d = Path(directory)
    if not _policy["clean_orphans"] or not d.is_dir():
        return 0
    host = tmp_tag().rsplit("-", 1)[0]
    removed, freed = _remove_orphans_in(d, host, time.time() - max_age_s, depth)
    if removed:
        log.info("removed %d orphaned temp files (%d bytes) in %s", removed, freed, d)
    return removed


def _remove_orphans_in(d: Path | str, host: str, too_old: float, depth: int) -> tuple[int, int]:
    """(files removed, bytes freed) of `remove_orphans` in `d` and `depth` levels below."""
    removed = freed = 0
    for entry in os.scandir(d):
        is_temp = entry.name.startswith(".") and entry.name.endswith(".tmp")
        if depth > 0 and entry.is_dir(follow_symlinks=False) and not is_temp:
            r, f = _remove_orphans_in(entry.path, host, too_old, depth - 1)
            removed, freed = removed + r, freed + f
            continue
        if not (entry.name.startswith(".") and entry.name.endswith(".tmp")):
            continue
        m = _TMP.match(entry.name)
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        dead = m is not None and m["host"] == host and not _alive(int(m["pid"]))
        if dead or st.st_mtime < too_old:
            try:
                if entry.is_dir(follow_symlinks=False):  # a `utils.io.mkdtemp` build dir
                    size = sum(f.stat().st_size for f in Path(entry.path).rglob("*") if f.is_file())
                    shutil.rmtree(entry.path)
                else:
                    size = st.st_size
                    os.unlink(entry.path)
            except FileNotFoundError:
                continue
            removed, freed = removed + 1, freed + size
    return removed, freed
