"""Micro-batching: the queries of concurrent requests share one encoder call.

Contract: `MicroBatcher(search)` with `search(granularity, queries, k) -> list[result]` (one
result per query, in order; the `IndexSet`'s search). `await batcher.submit(granularity,
queries, k)` queues a request and resolves to its results. One worker task takes the first
waiting request, waits at most `max_wait_s` for others (none while a batch is being searched:
requests that arrive meanwhile form the next batch), groups what it took by (granularity, k)
up to `max_queries` queries, and runs each group as one `search` call in a single search
thread, so the encoder and the index see one caller and requests never run their own model
passes. A search error fails only the requests of its group. `stats` counts requests, queries
and batches (served on `/healthz`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Request:
    granularity: str
    queries: list[str]
    k: int
    future: asyncio.Future


@dataclass
class BatchStats:
    """What the batcher has done: requests, queries, batches (encoder calls), largest batch."""

    requests: int = 0
    queries: int = 0
    batches: int = 0
    largest_batch: int = 0
    search_seconds: float = 0.0
    sizes: dict[int, int] = field(default_factory=dict)  # queries per batch -> count


class MicroBatcher:
    """Joins concurrent requests' queries into one `search` call per (granularity, k)."""

    def __init__(
        self,
        search: Callable[[str, Sequence[str], int], list[Any]],
        max_queries: int = 64,
        max_wait_s: float = 0.002,
    ) -> None:
        self._search, self.max_queries, self.max_wait_s = search, max_queries, max_wait_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="densex-search")
        self.stats = BatchStats()

    async def submit(self, granularity: str, queries: Sequence[str], k: int) -> list[Any]:
        """The results of `queries` at `granularity`, searched with other pending requests."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first call, or the app now runs in another event loop
            self._loop, self._queue = loop, asyncio.Queue()
            self._worker = None
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run())
        request = _Request(granularity, list(queries), int(k), loop.create_future())
        self._queue.put_nowait(request)
        return await request.future

    async def _run(self) -> None:
        assert self._queue is not None
        while True:
            batch = [await self._queue.get()]
            deadline = time.perf_counter() + self.max_wait_s
            while sum(len(r.queries) for r in batch) < self.max_queries:
                if self._queue.empty():
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        break
                    await asyncio.sleep(min(left, 0.0005))
                    continue
                batch.append(self._queue.get_nowait())
            for group in _groups(batch, self.max_queries):
                await self._search_group(group)

    async def _search_group(self, group: list[_Request]) -> None:
        queries = [q for r in group for q in r.queries]
        g, k = group[0].granularity, group[0].k
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        try:
            results = await loop.run_in_executor(self._pool, self._search, g, queries, k)
        except Exception as e:  # noqa: BLE001 - handed to the requests that asked
            for r in group:
                if not r.future.done():
                    r.future.set_exception(e)
            return
        s = self.stats
        s.search_seconds += time.perf_counter() - t0
        s.requests, s.queries, s.batches = (
            s.requests + len(group),
            s.queries + len(queries),
            s.batches + 1,
        )
        s.largest_batch = max(s.largest_batch, len(queries))
        s.sizes[len(queries)] = s.sizes.get(len(queries), 0) + 1
        start = 0
        for r in group:
            if not r.future.done():  # a client that went away cancelled its future
                r.future.set_result(results[start : start + len(r.queries)])
            start += len(r.queries)

    def close(self) -> None:
        """Stop the worker and the search thread."""
        if self._worker is not None:
            self._worker.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)


def _groups(batch: list[_Request], max_queries: int) -> list[list[_Request]]:
    """Requests grouped by (granularity, k) in arrival order, each group at most
    `max_queries` queries (a single larger request stays whole)."""
    by_key: dict[tuple[str, int], list[list[_Request]]] = {}
    for r in batch:
        groups = by_key.setdefault((r.granularity, r.k), [[]])
        if groups[-1] and sum(len(x.queries) for x in groups[-1]) + len(r.queries) > max_queries:
            groups.append([])
        groups[-1].append(r)
    return [g for groups in by_key.values() for g in groups]
