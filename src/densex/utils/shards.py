"""Resumable shards: the one plan every long job (encoding, generation) is cut into.

A job over n items is cut into fixed, contiguous row ranges that depend only on n and the
shard size, never on how many processes run it; each shard's output is written atomically
when complete, so a rerun computes only the shards that are missing (`pending`), and under
ddp rank r takes shards r, r + world, ... (`rank_share`): every item once, whole shards per
process.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

__all__ = ["batched", "pending", "plan_shards", "rank_share", "shard_stem"]


def plan_shards(n: int, shard_size: int) -> list[tuple[int, int]]:
    """Global row ranges [start, end) of `shard_size` rows (the last may be shorter)."""
    if shard_size <= 0:
        raise ValueError("shard_size must be positive")
    return [(s, min(s + shard_size, n)) for s in range(0, n, shard_size)]


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of `size` items (the last may be shorter) from a stream."""
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch


def shard_stem(start: int, end: int) -> str:
    """The file-name stem of shard [start, end): sorts in row order."""
    return f"{start:010d}-{end:010d}"


def pending(shards: Sequence[T], is_complete: Callable[[T], bool]) -> list[T]:
    """The shards whose output is not complete yet, in order."""
    return [s for s in shards if not is_complete(s)]


def rank_share(shards: Sequence[T], rank: int, world: int) -> list[T]:
    """The shards process `rank` of `world` runs: rank, rank + world, ..."""
    return list(shards[rank::world])
