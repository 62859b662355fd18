"""One build per artifact: advisory locks on a cached artifact's key (the `filelock` library).

An artifact `<dir>/<key>` (a directory or a file) is locked through `<dir>/.<key>.lock`, in its
parent directory, so processes on every host that mounts the cache agree where the file
system supports `flock` (filelock's `FileLock`; the kernel drops a dead holder's lock, so a
killed builder's lock is taken over at once). Where it does not, filelock falls back to a
marker file naming the holder, and a marker of a dead process on this host is taken over
(docs/architecture.md, "One build per artifact").

- `build_once(artifact, what, reuse, build)`: `reuse()` without the lock (a finished artifact
  costs nothing more), else under it: `reuse()` again (another process may have just built
  it), then `build()`. A waiter logs a progress line naming the holder (host, pid) at once and
  every `DENSEX_PROGRESS_S` seconds; after `cache.lock_timeout_s` it fails with a `LockTimeout`
  naming the lock file and the holder.
- `claim_each(items, path_of, is_done, what)`: shard claims. Yields the items this process
  claimed (a non-blocking try per item; done or held ones are skipped), each held until
  `release(path_of(item))`, so two processes on one pending artifact share its shards.
  `wait_for(path, what)` waits until a claim held elsewhere is released; `share_pending` is
  the loop of claiming passes and waits that ends when every item is done.

Holders: `<lock>.holder` beside the lock (`{"host", "pid", "since", "what"}`, atomic), read by
waiters for their progress lines. Locks held by this process are in a process-wide registry, so
the code that claims (a data loader) and the code that releases (a shard writer) share none.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import filelock

from densex.utils.integrity import policy
from densex.utils.io import DataError, read_json, tmp_tag, write_json
from densex.utils.logging import get_logger, interval_s

log = get_logger(__name__)

T = TypeVar("T")

__all__ = [
    "LockTimeout",
    "build_once",
    "claim_each",
    "clear_claims",
    "held_here",
    "holder_text",
    "lock_file",
    "locked",
    "release",
    "share_pending",
    "try_claim",
    "wait_for",
]

_held: dict[str, filelock.BaseFileLock] = {}  # lock file -> this process's held lock


class LockTimeout(DataError):
    """A lock was not acquired within `cache.lock_timeout_s` seconds."""


def lock_file(artifact: str | os.PathLike) -> Path:
    """`<parent>/.<name>.lock`: the lock of artifact `<parent>/<name>`."""
    p = Path(artifact)
    return p.parent / f".{p.name}.lock"


def _holder_file(lock: Path) -> Path:
    return lock.with_name(lock.name + ".holder")


def holder_text(artifact: str | os.PathLike) -> str:
    """`host H pid P (since HH:MM:SS)` of the artifact's lock holder, as it recorded itself."""
    try:
        info = read_json(_holder_file(lock_file(artifact)))
    except (DataError, OSError):
        return "holder not recorded yet"
    since = time.strftime("%H:%M:%S", time.localtime(float(info.get("since", 0))))
    return f"host {info.get('host')} pid {info.get('pid')} (since {since})"


def _new_lock(path: Path) -> filelock.BaseFileLock:
    path.parent.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(str(path), thread_local=False)


def _took(artifact: Path, lock: filelock.BaseFileLock, what: str) -> None:
    """Register a lock just acquired and record this process as its holder."""
    path = lock_file(artifact)
    _held[str(path)] = lock
    host, pid = tmp_tag().rsplit("-", 1)
    record = {"host": host, "pid": int(pid), "since": time.time(), "what": what}
    with contextlib.suppress(OSError, DataError):  # informational: a full disk is found later
        write_json(_holder_file(path), record, indent=None)


def try_claim(artifact: str | os.PathLike, what: str) -> bool:
    """Take the artifact's lock if nobody holds it (one attempt); True when taken (or already
    held by this process)."""
    artifact = Path(artifact)
    path = lock_file(artifact)
    if str(path) in _held:
        return True
    lock = _new_lock(path)
    try:
        lock.acquire(blocking=False)
    except filelock.Timeout:
        return False
    _took(artifact, lock, what)
    return True


def _acquire(artifact: Path, what: str, timeout_s: float | None) -> None:
    """Take the artifact's lock, waiting with progress lines; `LockTimeout` after `timeout_s`
    (default `cache.lock_timeout_s`)."""
    if try_claim(artifact, what):
        return
    timeout = float(policy()["lock_timeout_s"] if timeout_s is None else timeout_s)
    every = interval_s() or 30.0
    lock, start = _new_lock(lock_file(artifact)), time.monotonic()
    while True:
        waited = time.monotonic() - start
        log.info(
            "waiting for %s %s: locked by %s; waited %.0f s (timeout %.0f s)",
            what, artifact, holder_text(artifact), waited, timeout,
        )  # fmt: skip
        if waited >= timeout:
            raise LockTimeout(
                lock_file(artifact), None, None,
                f"timed out after {waited:.0f} s waiting for the lock on {what} {artifact}, held "
                f"by {holder_text(artifact)}; if that process is gone (on another host, or on a "
                "file system without flock), delete the lock file; or raise cache.lock_timeout_s",
            )  # fmt: skip
        try:
            lock.acquire(timeout=min(every, max(0.0, timeout - waited)))
        except filelock.Timeout:
            continue
        _took(artifact, lock, what)
        log.info("%s %s: lock taken after %.0f s", what, artifact, time.monotonic() - start)
        return


def release(artifact: str | os.PathLike) -> None:
    """Release this process's lock on the artifact (its holder record first); a no-op when
    this process does not hold it."""
    path = lock_file(artifact)
    lock = _held.pop(str(path), None)
    if lock is None:
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_holder_file(path))
    lock.release(force=True)


@contextlib.contextmanager
def locked(
    artifact: str | os.PathLike, what: str, timeout_s: float | None = None
) -> Iterator[None]:
    """Hold the artifact's lock for the block (re-entrant: a lock this process holds already
    is kept, and released by its first taker)."""
    artifact = Path(artifact)
    mine = str(lock_file(artifact)) in _held
    if not mine:
        _acquire(artifact, what, timeout_s)
    try:
        yield
    finally:
        if not mine:
            release(artifact)


def build_once(
    artifact: str | os.PathLike,
    what: str,
    reuse: Callable[[], T | None],
    build: Callable[[], T],
) -> T:
    """`reuse()` when it gives the finished artifact, else `build()` under the artifact's lock,
    after a second `reuse()` (the holder we waited for may have built it)."""
    found = reuse()
    if found is not None:
        return found
    with locked(artifact, what):
        found = reuse()
        if found is not None:
            log.info("%s %s: built by another process; reusing it", what, artifact)
            return found
        return build()


def claim_each(
    items: Iterable[T],
    path_of: Callable[[T], Path],
    is_done: Callable[[T], bool],
    what: str,
) -> Iterator[T]:
    """The items this process claims, one at a time: an item done or held by another process
    is skipped; a claimed one is checked again (done meanwhile: released and skipped) and is
    held until `release(path_of(item))`."""
    for item in items:
        if is_done(item) or not try_claim(path_of(item), what):
            continue
        if is_done(item):
            release(path_of(item))
            continue
        yield item


def share_pending(
    items: Sequence[T],
    is_done: Callable[[T], bool],
    path_of: Callable[[T], Path],
    run: Callable[[list[T]], None],
    what: str,
) -> None:
    """Until every item is done: `run(pending items)` (which claims what nobody holds, through
    `claim_each`), then wait for each item still pending (held by another process, which writes
    it or dies and leaves it to the next pass). A `RuntimeError` if passes stop making progress.
    When `run` raises, the claims it took are released before the error goes on: a long-lived
    process (a notebook, the search service) does not keep items from the others."""
    for _ in range(len(items) + 2):  # every pass completes or takes over at least one item
        pending = [item for item in items if not is_done(item)]
        if not pending:
            return
        try:
            run(pending)
        except BaseException:
            for item in pending:
                release(path_of(item))  # a no-op where this process holds no claim
            raise
        for item in pending:
            if not is_done(item):
                wait_for(path_of(item), what)
    left = [item for item in items if not is_done(item)]
    raise RuntimeError(f"{len(left)} {what}s still missing after every pass: {left[:3]}")


def wait_for(artifact: str | os.PathLike, what: str, timeout_s: float | None = None) -> None:
    """Wait until no process holds the artifact's lock (its holder finished, or died)."""
    with locked(artifact, what, timeout_s):
        pass


def held_here() -> list[str]:
    """The lock files this process holds (for tests and diagnostics)."""
    return sorted(_held)


def clear_claims(directory: str | os.PathLike, prefix: str) -> int:
    """Delete the claim lock files `.<prefix>*.lock` (and holder records) in `directory` once
    its artifact is complete: a process still waiting on one finds the shard done."""
    n = 0
    for p in Path(directory).glob(f".{prefix}*.lock*"):
        if str(p) in _held:
            continue
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
            n += 1
    return n
